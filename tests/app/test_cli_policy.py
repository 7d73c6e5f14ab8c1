"""``gridshift policy``: an operator sets a tenant's weight, quotas and budgets from the shell (audited) and reads the
burn-down; bad input is a message naming the option."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from app.cli import main


def gs(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_policy_set_and_show(cli_env: Path) -> None:
    assert gs("tenant", "create", "render-farm").exit_code == 0
    res = gs("policy", "set", "render-farm", "--weight", "2", "--carbon-budget-kg", "40000", "--budget-period",
             "quarter", "--max-queued-jobs", "50")
    assert res.exit_code == 0, res.output
    shown = json.loads(gs("policy", "show", "render-farm").output)
    assert shown[0]["weight"] == 2.0 and shown[0]["period"] == "quarter"
    assert shown[0]["budgets"]["carbon_kg"]["budget"] == 40000.0
    assert shown[0]["quotas"]["queued_jobs"]["cap"] == 50


def test_policy_bad_input_names_the_option(cli_env: Path) -> None:
    assert gs("tenant", "create", "acme").exit_code == 0
    bad = gs("policy", "set", "acme", "--weight", "0")
    assert bad.exit_code == 2 and "--weight" in bad.output
    bad = gs("policy", "set", "acme", "--max-gpus", "h100")
    assert bad.exit_code == 2 and "--max-gpus" in bad.output
    unknown = gs("policy", "set", "nobody", "--weight", "1")
    assert unknown.exit_code == 1 and "tenant 'nobody' not found" in unknown.output
