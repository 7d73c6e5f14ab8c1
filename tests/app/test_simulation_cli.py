"""``gridshift simulate``: the stored history of a past period replayed under a change, printed as a table of current
against scenario and difference, with ``--json`` the whole comparison as the last line; bad input names the field."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli import main
from app.config import Settings
from app.db import make_engine, make_session_factory
from tests.app.test_simulation_api import DAYS, JOBS_PER_DAY, period_start, seed_history


def gs(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def history_env(cli_env: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GRIDSHIFT_PLAN_TIME_LIMIT_S", "2")
    engine = make_engine(Settings.from_env())
    start = period_start()
    with make_session_factory(engine)() as session:
        seed_history(session, start)
    engine.dispose()
    return start


def test_simulate_prints_current_scenario_and_difference(history_env) -> None:  # type: ignore[no-untyped-def]
    first, last = history_env.date().isoformat(), (history_env + timedelta(days=DAYS - 1)).date().isoformat()
    res = gs("simulate", "--from", first, "--to", last, "--set", "region.de.gpus.h100=16", "--set",
             "region.fi.pue=1.05", "--objective", "carbon", "--json", "--no-progress")
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["objective"] == {"current": "cost", "scenario": "carbon"}
    assert result["scenario"]["regions"] == {"de": {"gpus": {"h100": 16}}, "fi": {"pue": 1.05}}
    assert result["current"]["jobs"] == JOBS_PER_DAY * DAYS
    assert result["changed"]["deadline_misses"] < result["current"]["deadline_misses"]
    header = next(line for line in lines if "current" in line and "scenario" in line and "difference" in line)
    assert header.split() == ["current", "scenario", "difference", "diff", "%"]
    misses = next(line for line in lines if line.startswith("deadline misses")).split()[2:5]
    assert [int(x) for x in misses] == [result["current"]["deadline_misses"], result["changed"]["deadline_misses"],
                                         result["difference"]["deadline_misses"]]
    cost = next(line for line in lines if line.startswith("cost [EUR]")).split()
    assert float(cost[2].replace(",", "")) == pytest.approx(result["current"]["cost"], abs=0.01)


def test_simulate_bad_input_names_the_field(history_env) -> None:  # type: ignore[no-untyped-def]
    day = history_env.date().isoformat()
    bad = gs("simulate", "--from", day, "--to", day, "--set", "region.de.gpus.b200=8", "--no-progress")
    assert bad.exit_code == 2 and "regions.de.gpus.b200" in bad.output and "valid: h100" in bad.output
    bad = gs("simulate", "--from", day, "--to", day, "--set", "gpus=8", "--no-progress")
    assert bad.exit_code == 2 and "gpus" in bad.output
    far = (history_env + timedelta(days=400)).date().isoformat()
    bad = gs("simulate", "--from", day, "--to", far, "--no-progress")
    assert bad.exit_code == 2 and "to:" in bad.output and "at most 92 days" in bad.output
