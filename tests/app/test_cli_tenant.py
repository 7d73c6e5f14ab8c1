"""``gridshift tenant``: bad input is refused with a message, never a traceback."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from app.cli import main


def gs(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_tenant_errors_are_messages_not_tracebacks(cli_env: Path) -> None:
    bad = gs("tenant", "create", "Bad_Slug")
    assert bad.exit_code == 1 and isinstance(bad.exception, SystemExit)
    assert "Error: bad tenant; slug:" in bad.output
    assert gs("tenant", "create", "acme").exit_code == 0
    again = gs("tenant", "create", "acme")
    assert again.exit_code == 1 and "Error: tenant 'acme' already exists" in again.output
    assert isinstance(again.exception, SystemExit)
    unknown = gs("tenant", "token", "nobody")
    assert unknown.exit_code == 1 and "Error: tenant 'nobody' not found" in unknown.output
    assert isinstance(unknown.exception, SystemExit)


def test_token_expiry_of_zero_or_negative_days_is_refused(cli_env: Path) -> None:
    assert gs("tenant", "create", "acme").exit_code == 0
    for days in ("0", "-3", "9999999"):
        res = gs("tenant", "token", "acme", "--expires-in-days", days)
        assert res.exit_code == 2 and "--expires-in-days" in res.output, res.output
        assert "gs_" not in res.output  # no token issued
    assert gs("tenant", "token", "acme", "--expires-in-days", "1").exit_code == 0
