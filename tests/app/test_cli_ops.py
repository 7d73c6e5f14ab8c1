"""``gridshift plan``, ``report``, ``jobs submit|list`` and ``market import`` on an embedded deployment."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import func, select

from app.cli import main
from app.config import Settings
from app.db import make_engine
from app.models import Job, Plan


def gs(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _count(model: type) -> int:
    engine = make_engine(Settings.from_env())
    with engine.connect() as c:
        n = c.scalar(select(func.count()).select_from(model))
    engine.dispose()
    return int(n or 0)


@pytest.fixture
def demo_env(cli_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The synthetic demo fleet (6 jobs, its first plan), planning with a 2 s limit."""
    monkeypatch.setenv("GRIDSHIFT_PLAN_TIME_LIMIT_S", "2")
    res = gs("demo", "seed", "--jobs", "6")
    assert res.exit_code == 0, res.output
    return cli_env


def test_plan_dry_run_stores_nothing_and_plan_stores_the_current_plan(demo_env: Path) -> None:
    plans_before = _count(Plan)
    dry = gs("plan", "--dry-run", "--json", "--no-progress")
    assert dry.exit_code == 0, dry.output
    summary = json.loads(dry.stdout.strip().splitlines()[-1])
    assert summary["dry_run"] and summary["plan_id"] is None
    assert summary["jobs_planned"] + summary["jobs_left_out"] == 6
    assert summary["cost"] <= summary["run_now_cost"] + 1e-6  # never worse than running every job now
    assert "dry run (nothing stored)" in dry.stdout and "run now" in dry.stdout and "gap" in dry.stdout
    assert _count(Plan) == plans_before

    real = gs("plan", "--objective", "carbon", "--json")
    assert real.exit_code == 0, real.output
    stored = json.loads(real.stdout.strip().splitlines()[-1])
    assert stored["objective"] == "carbon" and stored["is_current"] and stored["plan_id"] is not None
    assert _count(Plan) == plans_before + 1
    assert "plan: 100%" in real.stderr  # the progress bar goes to stderr, ending full

    capped = gs("plan", "--objective", "carbon_cost_cap", "--no-progress")
    assert capped.exit_code == 1 and "COST_CAP" in capped.output


def test_report_labels_synthetic_data_in_table_csv_and_pdf(demo_env: Path, tmp_path: Path) -> None:
    month = datetime.now(UTC).strftime("%Y-%m")
    table = gs("report", "--month", month)
    assert table.exit_code == 0, table.output
    assert "NOTE: Not live market data: SYNTHETIC" in table.stdout and "tenant" in table.stdout
    as_csv = gs("report", "--month", month, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert rows and {r["market_data"] for r in rows} == {"synthetic"} and rows[-1]["region"] == "all"
    pdf = tmp_path / "r.pdf"
    res = gs("report", "--month", month, "--format", "pdf", "--output", str(pdf), "--tenant", "ml-platform")
    assert res.exit_code == 0, res.output
    assert pdf.read_bytes().startswith(b"%PDF") and "SYNTHETIC" in res.stdout
    bad = gs("report", "--month", "2030-13")
    assert bad.exit_code == 1 and "month" in bad.output


def _job_line(i: int, deadline: str) -> str:
    return f"job-{i},2,,{deadline},echo hi,h100=120;a100=300\n"


def test_jobs_submit_lists_every_bad_line_and_stores_nothing(demo_env: Path, tmp_path: Path) -> None:
    before = _count(Job)
    soon = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:00:00Z")
    header = "name,gpu_count,reference_gpu_hours,deadline_at,command,durations_minutes\n"
    body = _job_line(1, soon) + "job-2,two,4,tomorrow,echo,\n" + _job_line(3, soon) + "job-4,1,,2030-01-01,echo,\n"
    bad = tmp_path / "bad.csv"
    bad.write_text(header.replace(",durations_minutes", "") + "".join(
        ",".join(line.split(",")[:5]) + "\n" for line in body.splitlines()))
    res = gs("jobs", "submit", str(bad), "--tenant", "ml-platform")
    assert res.exit_code == 1
    assert "line 3: gpu_count" in res.output and "line 3: deadline_at" in res.output
    assert "line 5: deadline_at: needs a time zone" in res.output and "line 2" not in res.output
    assert _count(Job) == before

    many = tmp_path / "many.csv"
    many.write_text(header + "".join(_job_line(i, "not-a-time") for i in range(150)))
    res = gs("jobs", "submit", str(many), "--tenant", "ml-platform")
    assert res.exit_code == 1 and "150 of 150 jobs are invalid" in res.output
    assert res.output.count(": deadline_at:") == 100 and "... and 50 more (150 errors in all)" in res.output

    fleet_bad = tmp_path / "fleet.json"  # readable, but the fleet refuses one: named by its line in the file
    fleet_bad.write_text(json.dumps([
        {"name": "ok", "gpu_count": 1, "reference_gpu_hours": 2, "deadline_at": soon, "command": "true"},
        {"name": "huge", "gpu_count": 5000, "reference_gpu_hours": 2, "deadline_at": soon, "command": "true"},
    ], indent=1))
    res = gs("jobs", "submit", str(fleet_bad), "--tenant", "ml-platform")
    assert res.exit_code == 1 and "line 9: gpu_count" in res.output, res.output
    assert _count(Job) == before

    good = tmp_path / "good.csv"
    good.write_text(header + _job_line(1, soon) + _job_line(2, soon))
    res = gs("jobs", "submit", str(good), "--tenant", "ml-platform", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["count"] == 2
    listed = gs("jobs", "list", "--tenant", "ml-platform", "--state", "pending", "--json")
    assert listed.exit_code == 0, listed.output
    names = [j["name"] for j in json.loads(listed.stdout.strip().splitlines()[-1])]
    assert names[:2] == ["job-2", "job-1"]
    assert gs("jobs", "list", "--tenant", "nobody").exit_code == 1


def test_market_import_shows_progress_and_ends_with_a_summary(cli_env: Path, tmp_path: Path) -> None:
    good = tmp_path / "de.csv"
    good.write_text("zone,kind,timestamp,value\n" + "".join(
        f"DE,price,2022-01-01T{h:02d}:00:00Z,{h}\n" for h in range(24)))
    res = gs("market", "import", str(good))
    assert res.exit_code == 0, res.output
    assert "imported 24 points from 1 file(s)" in res.stdout and "storing" in res.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("zone,kind,timestamp,value\n" + "".join(f"DE,price,oops-{i},1\n" for i in range(130)))
    res = gs("market", "import", str(bad), "--no-progress")
    assert res.exit_code == 1 and "130 bad line(s)" in res.output
    assert res.output.count("  line ") == 100 and "... and 30 more" in res.output
