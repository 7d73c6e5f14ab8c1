"""``gridshift hardware``: import the catalog, list profiles with their flags, record a profile, refuse bad input."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from click.testing import CliRunner

from app.cli import main
from app.config import Settings
from tests.conftest import REPO


def gs(_tmp: Path, *args: str) -> SimpleNamespace:
    res = CliRunner().invoke(main, list(args))
    out = res.stdout
    return SimpleNamespace(returncode=res.exit_code, stdout=out, stderr=res.stderr if res.stderr else out)


def test_hardware_import_list_and_profile(cli_env):
    tmp_path = cli_env
    imported = gs(tmp_path, "hardware", "import")
    assert imported.returncode == 0, imported.stderr
    assert "8 hardware types, 4 new measured profiles" in imported.stdout
    flagged = gs(tmp_path, "hardware", "list", "--flagged")
    rows = [line.split() for line in flagged.stdout.splitlines() if line.startswith("h200")]
    assert {r[1] for r in rows} == {"batch_inference", "rendering", "fine_tuning"}  # measured > 20 % off estimate
    recorded = gs(tmp_path, "hardware", "profile", "--class", "rendering", "--hardware", "l40s",
                  "--steps-per-s", "40", "--power-w", "290")
    assert recorded.returncode == 0 and "within 20 %" in recorded.stdout, recorded.stderr
    bad = gs(tmp_path, "hardware", "profile", "--class", "rendering", "--hardware", "l40s",
             "--steps-per-s", "40", "--power-w", "-1")
    assert bad.returncode != 0 and "power_w" in bad.stderr
    unknown = gs(tmp_path, "hardware", "profile", "--class", "rendering", "--hardware", "gpu9",
                 "--steps-per-s", "40", "--power-w", "100")
    assert unknown.returncode != 0 and "known: a100" in unknown.stderr
    listed = gs(tmp_path, "hardware", "list").stdout
    l40s = next(line for line in listed.splitlines() if line.startswith("l40s") and "rendering" in line)
    assert "290.0" in l40s and "measured" in l40s  # the bad attempts left the recorded profile in force


def test_a_bad_catalog_file_is_rejected_whole(cli_env):
    tmp_path = cli_env
    entries = json.loads((REPO / "app" / "data" / "hardware_catalog.json").read_text())["hardware"]
    entries[2]["idle_w"] = "lots"
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"hardware": entries}))
    res = gs(tmp_path, "hardware", "import", "--file", str(path))
    assert res.returncode != 0 and "hardware[2].idle_w" in res.stderr
    assert "h100" not in gs(tmp_path, "hardware", "list").stdout


def test_a_calibration_the_cluster_refuses_is_a_message_naming_the_flag(cli_env, tmp_path: Path) -> None:
    from app.db import make_engine, make_session_factory, session_scope
    from app.models import Cluster, Region

    assert gs(tmp_path, "hardware", "import").returncode == 0
    with session_scope(make_session_factory(make_engine(Settings.from_env()))) as s:
        region = Region(code="de-1", name="DE 1", zone="DE", power_budget_kw=100.0)
        s.add(region)
        s.flush()
        s.add(Cluster(region_id=region.id, name="box", kind="local",
                      config={"state_dir": str(tmp_path / "rt"), "gpus": {"h100": [0]}}))  # fmt: skip
    base = ("hardware", "profile", "--class", "training", "--cluster", "box", "--command", "true")
    too_many = gs(tmp_path, *base, "--hardware", "h100", "--gpus", "4")
    assert too_many.returncode == 1 and "--gpus: run gs-profile-h100-" in too_many.stderr, too_many.stderr
    negative = gs(tmp_path, *base, "--hardware", "h100", "--gpus", "-1")
    assert negative.returncode == 2 and "--gpus" in negative.stderr
    spaced = gs(tmp_path, *base, "--hardware", "h 100")
    assert spaced.returncode == 1 and "--hardware: " in spaced.stderr, spaced.stderr
