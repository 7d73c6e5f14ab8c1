"""Fixtures shared by the service's tests (the database, app and client fixtures live in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import migrate
from app.config import Settings


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An embedded-default deployment in tmp_path (SQLite under GRIDSHIFT_VAR_DIR), migrated."""
    for var in ("GRIDSHIFT_DATABASE_URL", "GRIDSHIFT_BROKER_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GRIDSHIFT_VAR_DIR", str(tmp_path))
    migrate.upgrade(Settings.from_env())
    return tmp_path
