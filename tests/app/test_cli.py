from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, func, select

from app.models import Job, MarketSeries, Region
from tests.conftest import REPO


def gs(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"GRIDSHIFT_VAR_DIR": str(tmp), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=120)


def test_embedded_default_migrates_seeds_and_imports(tmp_path):
    assert gs(tmp_path, "db", "upgrade").returncode == 0
    seeded = gs(tmp_path, "demo", "seed", "--jobs", "6")
    assert seeded.returncode == 0, seeded.stderr
    assert "SYNTHETIC" in seeded.stdout
    tokens = json.loads((tmp_path / "demo_tokens.json").read_text())
    assert set(tokens) == {"ops", "ml-platform", "render-farm"}
    engine = create_engine(f"sqlite:///{tmp_path / 'gridshift.db'}")
    with engine.connect() as c:
        assert sorted(c.scalars(select(Region.zone))) == ["DE", "ES", "FI", "FR", "PL"]
        assert c.scalar(select(func.count()).select_from(Job)) == 6
    bad = tmp_path / "bad.csv"
    bad.write_text("zone,kind,timestamp,value\nDE,price,2022-01-01T00:00:00Z,1\nDE,price,2022-01-01T01:00:00Z,oops\n")
    res = gs(tmp_path, "market", "import", str(bad))
    assert res.returncode != 0 and "line 3" in res.stderr
    with engine.connect() as c:
        n_bad = c.scalar(select(func.count()).select_from(MarketSeries).where(MarketSeries.source == "bad"))
    assert n_bad == 0
    # seeding again changes nothing that exists and issues no new tokens
    again = gs(tmp_path, "demo", "seed", "--jobs", "6")
    assert again.returncode == 0 and "demo tokens" not in again.stdout


def test_demo_seed_stores_exactly_the_jobs_asked_for(tmp_path):
    assert gs(tmp_path, "db", "upgrade").returncode == 0
    seeded = gs(tmp_path, "demo", "seed", "--jobs", "3")  # odd: one team gets one more (--jobs 1 crashed)
    assert seeded.returncode == 0, seeded.stderr
    engine = create_engine(f"sqlite:///{tmp_path / 'gridshift.db'}")
    with engine.connect() as c:
        assert c.scalar(select(func.count()).select_from(Job)) == 3
