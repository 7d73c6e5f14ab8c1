"""Blueprints and task modules are registered from explicit lists; a module left off its list fails here."""

from __future__ import annotations

import importlib
import pkgutil

from app import api as api_package
from app import tasks as tasks_package
from app.api import blueprints
from app.tasks import REPLAN, TASK_MODULES


def test_every_blueprint_module_is_in_the_explicit_list_and_registered(app):  # type: ignore[no-untyped-def]
    defined = set()
    for mod in pkgutil.iter_modules(api_package.__path__):
        blp = getattr(importlib.import_module(f"app.api.{mod.name}"), "blp", None)
        if blp is not None:
            defined.add(blp.name)
    listed = [b.name for b in blueprints()]
    assert sorted(listed) == sorted(defined) and len(listed) == len(set(listed))
    assert set(listed) <= set(app.blueprints)


def test_every_task_module_is_declared_and_the_replan_task_answers_to_its_name(app):  # type: ignore[no-untyped-def]
    assert set(TASK_MODULES) == {f"app.tasks.{m.name}" for m in pkgutil.iter_modules(tasks_package.__path__)}
    assert REPLAN in app.extensions["celery"].tasks


def test_every_command_module_is_in_the_explicit_list_and_registered():
    from app import cli
    from app import commands as commands_package

    defined = {
        getattr(importlib.import_module(f"app.commands.{m.name}"), "command", None)
        for m in pkgutil.iter_modules(commands_package.__path__)
    } - {None}
    assert set(cli.COMMAND_GROUPS) == defined and len(cli.COMMAND_GROUPS) == len(defined)
    assert all(cli.main.commands.get(c.name or "") is c for c in cli.COMMAND_GROUPS)
