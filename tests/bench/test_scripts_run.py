"""Every benchmark and probe in bench/ that imports its neighbours (``from bench...``) runs the way its docstring
says, ``python bench/<name>.py ...``, from any working directory: three probes once needed the repository on
``PYTHONPATH`` and failed on their first import."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _scripts() -> list[Path]:
    out = []
    for p in sorted(BENCH.glob("*.py")):
        text = p.read_text()
        if "__main__" in text and re.search(r"^\s*(from bench[. ]|import bench)", text, re.M):
            out.append(p)
    return out


def test_every_script_that_imports_bench_starts_from_another_directory(tmp_path):
    scripts = _scripts()
    assert len(scripts) >= 3  # plan_bench, fixing_probe, gap_probe at least
    # started side by side: each one's cost is its imports
    procs = {
        p.name: subprocess.Popen(
            [sys.executable, str(p), "--help"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in scripts
    }
    failed = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0 or "usage:" not in out:
            failed[name] = err[-600:]
    assert not failed, failed
