from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Settings


def test_defaults_are_embedded_sqlite():
    s = Settings.from_env({})
    assert s.effective_database_url.startswith("sqlite:///") and s.effective_database_url.endswith("var/gridshift.db")
    assert s.effective_broker_url.startswith("sqla+sqlite:///")


def test_environment_overrides_and_types():
    s = Settings.from_env({"GRIDSHIFT_DATABASE_URL": "postgresql+psycopg://u@h/db", "GRIDSHIFT_SLOT_MINUTES": "15",
                           "GRIDSHIFT_SESSION_COOKIE_SECURE": "true", "GRIDSHIFT_VAR_DIR": "/tmp/x",
                           "GRIDSHIFT_ENCRYPTION_KEYS": "k1, k2"})
    assert s.database_url.startswith("postgresql") and not s.is_sqlite
    assert s.slot_minutes == 15 and s.session_cookie_secure is True and s.var_dir == Path("/tmp/x")
    assert s.encryption_keys == ("k1", "k2")


def test_unknown_or_malformed_variables_are_named():
    with pytest.raises(ValueError, match="GRIDSHIFT_SLOT_MINUTS"):
        Settings.from_env({"GRIDSHIFT_SLOT_MINUTS": "15"})
    with pytest.raises(ValueError, match="GRIDSHIFT_SLOT_MINUTES"):
        Settings.from_env({"GRIDSHIFT_SLOT_MINUTES": "quarter"})


def test_exchange_rates_are_read_checked_and_win_over_the_old_extra_entry():
    s = Settings.from_env({"GRIDSHIFT_FX_RATES": "CHF=1.06, GBP=1.17"})
    assert s.fx_rates == {"CHF": 1.06, "GBP": 1.17}
    old = Settings(extra={"fx_rates": {"CHF": 0.9, "PLN": 0.23}}, fx_rates={"CHF": 1.06})
    assert old.exchange_rates == {"CHF": 1.06, "PLN": 0.23}
    for bad, says in [("CHF", "not CUR=rate"), ("chf=1.0", "not CUR=rate"), ("CHF=one", "not a number"),
                      ("CHF=-1", "positive"), ("CHF=inf", "positive"), ("CHF=1,CHF=2", "twice")]:
        with pytest.raises(ValueError, match=f"GRIDSHIFT_FX_RATES.*{says}"):
            Settings.from_env({"GRIDSHIFT_FX_RATES": bad})


def test_plan_retention_is_read_and_checked():
    assert Settings.from_env({}).plan_retention_days == 14
    assert Settings.from_env({"GRIDSHIFT_PLAN_RETENTION_DAYS": "3"}).plan_retention_days == 3
    assert Settings.from_env({"GRIDSHIFT_PLAN_RETENTION_DAYS": "0"}).plan_retention_days == 0
    for bad in ("-1", "two weeks"):
        with pytest.raises(ValueError, match="GRIDSHIFT_PLAN_RETENTION_DAYS"):
            Settings.from_env({"GRIDSHIFT_PLAN_RETENTION_DAYS": bad})


def test_objective_is_checked_at_start_and_the_error_names_the_variable_and_the_valid_values():
    from optimizer import ObjectiveKind

    assert Settings.from_env({}).objective is ObjectiveKind.COST
    assert Settings.from_env({"GRIDSHIFT_OBJECTIVE": "carbon"}).objective is ObjectiveKind.CARBON
    valid = "valid: cost, carbon, weighted, carbon_cost_cap"
    with pytest.raises(ValueError, match=f"GRIDSHIFT_OBJECTIVE.*'cheapest' is not an objective; {valid}"):
        Settings.from_env({"GRIDSHIFT_OBJECTIVE": "cheapest"})
    with pytest.raises(ValueError, match="GRIDSHIFT_OBJECTIVE"):
        Settings(objective="cheapest")  # type: ignore[arg-type]


def test_cost_cap_objective_is_reachable_from_the_environment_and_needs_its_cap():
    from app.services.planning import objective_of
    from optimizer import ObjectiveKind

    s = Settings.from_env({"GRIDSHIFT_OBJECTIVE": "carbon_cost_cap", "GRIDSHIFT_COST_CAP": "120.5"})
    assert s.objective is ObjectiveKind.CARBON_WITH_COST_CAP and s.cost_cap == 120.5
    objective = objective_of(s, s.objective)  # what a plan run gets
    assert objective.kind is ObjectiveKind.CARBON_WITH_COST_CAP and objective.cost_cap == 120.5
    with pytest.raises(ValueError, match="GRIDSHIFT_OBJECTIVE=carbon_cost_cap needs GRIDSHIFT_COST_CAP"):
        Settings.from_env({"GRIDSHIFT_OBJECTIVE": "carbon_cost_cap"})
    for bad in ("-1", "inf"):
        with pytest.raises(ValueError, match=r"GRIDSHIFT_COST_CAP.*>= 0"):
            Settings.from_env({"GRIDSHIFT_COST_CAP": bad})
    with pytest.raises(ValueError, match="GRIDSHIFT_COST_CAP"):
        Settings.from_env({"GRIDSHIFT_COST_CAP": "a lot"})


def test_the_grid_is_quarter_hourly_by_default_and_must_divide_the_hour():
    assert Settings.from_env({}).slot_minutes == 15
    assert Settings.from_env({"GRIDSHIFT_SLOT_MINUTES": "60"}).slot_minutes == 60
    for bad in ("4", "7", "45", "90"):
        with pytest.raises(ValueError, match=r"GRIDSHIFT_SLOT_MINUTES.*divide 60"):
            Settings.from_env({"GRIDSHIFT_SLOT_MINUTES": bad})
