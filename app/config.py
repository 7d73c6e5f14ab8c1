"""Settings: the only code that reads ``os.environ`` (``GRIDSHIFT_*`` variables)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from optimizer.grid import check_slot_minutes
from optimizer.problem import ObjectiveKind

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True, slots=True)
class Settings:
    """Runtime configuration. Defaults are the embedded ones: SQLite files under ``./var``, no server."""

    var_dir: Path = Path("var")
    database_url: str = ""  # default: sqlite file var/gridshift.db
    broker_url: str = ""  # default: Celery's SQLAlchemy transport on var/broker.db
    result_backend: str | None = None
    secret_key: str = ""  # Flask session signing; generated into var/secret_key when empty
    encryption_keys: tuple[str, ...] = ()  # Fernet keys for connector credentials, newest first
    timezone: str = "UTC"  # deployment time zone for cron-like schedules
    nightly_plan_at: str = "00:30"
    price_refresh_at: str = "12:45"
    price_refresh_timezone: str = "Europe/Brussels"
    dispatch_interval_s: float = 30.0
    sync_interval_s: float = 30.0
    replan_interval_s: float = 3600.0
    claim_stale_s: float = 120.0
    visibility_timeout_s: int = 60
    # planning grid [min]: 5 to 60, dividing the hour (optimizer.grid); hourly prices are held over its slots
    slot_minutes: int = 15
    horizon_hours: int = 72
    plan_time_limit_s: float = 10.0
    # the nightly plan has time to spare: from ~15 s the planner also runs its MIP around the best plan
    nightly_plan_time_limit_s: float = 60.0
    # superseded plans older than this keep their summary; their assignment rows nothing reads are deleted (0: keep)
    plan_retention_days: int = 14
    # finished plan runs (table plan_runs: every plan made, by whom or what, and its outcome) older than this are
    # deleted by the hourly clean-up; queued and running ones are kept (0: keep every run)
    plan_run_retention_days: int = 30
    # what the planner minimises (optimizer.ObjectiveKind): cost, carbon, weighted or carbon_cost_cap
    objective: ObjectiveKind = ObjectiveKind.COST
    carbon_price_per_tonne: float = 80.0  # weighted objective [currency/tCO2eq]
    # carbon_cost_cap: the total energy cost a plan may spend [reporting currency]; required by that objective
    cost_cap: float | None = None
    reporting_currency: str = "EUR"
    # units of reporting currency per unit of another currency, for regions priced in it: "CHF=1.06,GBP=1.17"
    fx_rates: dict[str, float] = field(default_factory=dict)
    max_batch_jobs: int = 10_000
    max_content_length: int = 32 * 1024 * 1024
    page_size_max: int = 500
    log_max_bytes: int = 1024 * 1024  # most of a run's log one request returns [bytes]
    rate_limit: str = "600 per minute"
    rate_limit_storage_url: str = "memory://"
    # proxies whose X-Forwarded-For is believed (addresses or CIDR networks, e.g. "172.28.0.10,10.0.0.0/8")
    trusted_proxies: tuple[str, ...] = ()
    # per tenant, whichever of its tokens asks: the budget of expensive work (units of ~10 ms CPU; "" turns it off),
    # how many expensive requests may run at once, how long a monthly report answer is reused [s]
    cost_budget: str = "600 per minute"
    cost_concurrency: int = 2
    report_cache_s: float = 60.0
    max_tokens_per_tenant: int = 50  # live (unrevoked, unexpired) API tokens a tenant may hold
    auth_cache_s: float = 5.0  # how long a process trusts a resolved bearer token (0: ask the database every time)
    runtime_timeout_s: float = 30.0
    local_runtime_dir: Path = Path("var/runs")
    session_cookie_secure: bool = False
    # /metrics: a bearer token scrapes must carry (empty: none), else loopback clients only unless this is false
    metrics_token: str = ""
    metrics_loopback_only: bool = True
    # gunicorn's workers share their HTTP counts through this folder; read from PROMETHEUS_MULTIPROC_DIR, the
    # variable prometheus_client itself reads (a GRIDSHIFT_ name would not reach the library)
    metrics_multiproc_dir: Path | None = None
    # the other gunicorn pools' PROMETHEUS_MULTIPROC_DIR folders (compose: web-heavy's), whose HTTP counts this
    # pool's /metrics adds to its own, so that one scrape covers every pool (comma-separated)
    metrics_pool_dirs: tuple[str, ...] = ()
    log_format: str = "text"  # text or json (one JSON object a line, with request and run ids)
    log_level: str = "INFO"
    testing: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(
                    f"GRIDSHIFT_TRUSTED_PROXIES (Settings.trusted_proxies): {proxy!r} is not an address or a network"
                ) from None
        if self.log_format not in ("text", "json"):
            raise ValueError(f"GRIDSHIFT_LOG_FORMAT (Settings.log_format): {self.log_format!r} is not text or json")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"GRIDSHIFT_LOG_LEVEL (Settings.log_level): {self.log_level!r} is not DEBUG, INFO, "
                             "WARNING, ERROR or CRITICAL")
        try:
            check_slot_minutes(self.slot_minutes)
        except ValueError as exc:
            raise ValueError(f"GRIDSHIFT_SLOT_MINUTES (Settings.slot_minutes): {exc}") from None
        try:
            object.__setattr__(self, "objective", ObjectiveKind(self.objective))
        except ValueError:
            valid = ", ".join(k.value for k in ObjectiveKind)
            raise ValueError(
                f"GRIDSHIFT_OBJECTIVE (Settings.objective): {self.objective!r} is not an objective; valid: {valid}"
            ) from None
        cap = self.cost_cap if self.cost_cap is not None else self.extra.get("cost_cap")  # extra: before the setting
        if cap is not None:
            try:
                cap = float(cap)
            except (TypeError, ValueError):
                cap = float("nan")
            if not (0 <= cap < float("inf")):
                raise ValueError(f"GRIDSHIFT_COST_CAP (Settings.cost_cap): must be a number >= 0, got {cap!r}")
            object.__setattr__(self, "cost_cap", cap)
            # app.services.planning reads the cap from extra["cost_cap"], where it was set before the setting
            object.__setattr__(self, "extra", {**self.extra, "cost_cap": cap})
        if self.objective is ObjectiveKind.CARBON_WITH_COST_CAP and cap is None:
            raise ValueError(
                "GRIDSHIFT_OBJECTIVE=carbon_cost_cap needs GRIDSHIFT_COST_CAP (Settings.cost_cap): the total energy "
                "cost a plan may spend [reporting currency]"
            )

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.var_dir / 'gridshift.db').resolve()}"

    @property
    def effective_broker_url(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{(self.var_dir / 'broker.db').resolve()}"

    @property
    def exchange_rates(self) -> dict[str, float]:
        """``fx_rates``, over any left in ``extra["fx_rates"]`` (where they were set before the setting existed)."""
        return {**dict(self.extra.get("fx_rates", {})), **self.fx_rates}

    @property
    def is_sqlite(self) -> bool:
        return self.effective_database_url.startswith("sqlite")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Read ``GRIDSHIFT_<FIELD>`` variables; unknown ``GRIDSHIFT_*`` names are an error."""
        env = dict(os.environ if environ is None else environ)
        known = {f.name: f for f in fields(cls) if f.name != "extra"}
        values: dict[str, Any] = {}
        for key, raw in env.items():
            if not key.startswith("GRIDSHIFT_"):
                continue
            name = key[len("GRIDSHIFT_") :].lower()
            if name == "shared_data" or name.startswith("test_"):
                continue  # read by tests and benches only
            if name == "metrics_multiproc_dir":
                raise ValueError(f"{key}: set PROMETHEUS_MULTIPROC_DIR instead (prometheus_client reads it itself)")
            if name not in known:
                raise ValueError(f"{key}: unknown setting; known: {', '.join(sorted(k.upper() for k in known))}")
            values[name] = _coerce(key, known[name].type, raw)
            if name == "plan_retention_days" and values[name] < 0:
                raise ValueError(f"{key}: must be 0 (keep every plan's rows) or a number of days, got {raw!r}")
            if name == "plan_run_retention_days" and values[name] < 0:
                raise ValueError(f"{key}: must be 0 (keep every plan run) or a number of days, got {raw!r}")
        if env.get("PROMETHEUS_MULTIPROC_DIR"):
            values["metrics_multiproc_dir"] = Path(env["PROMETHEUS_MULTIPROC_DIR"])
        values.update(overrides)
        return replace(cls(), **values)


def _coerce(key: str, typ: Any, raw: str) -> Any:
    t = str(typ)
    if t == "dict[str, float]":
        return _rates(key, raw)  # its errors name the item
    try:
        if t in ("bool",):
            return raw.strip().lower() in _TRUE
        if t == "int":
            return int(raw)
        if t == "float":
            return float(raw)
        if t == "Path":
            return Path(raw)
        if t.startswith("tuple"):
            return tuple(p.strip() for p in raw.split(",") if p.strip())
        if t == "str | None":
            return raw or None
        if t == "float | None":
            return float(raw) if raw.strip() else None
        return raw
    except ValueError as exc:
        raise ValueError(f"{key}: cannot read {raw!r} as {t}") from exc


def _rates(key: str, raw: str) -> dict[str, float]:
    """``CUR=rate`` pairs, comma-separated; a currency is 3 capital letters, a rate a positive number."""
    out: dict[str, float] = {}
    for item in (p.strip() for p in raw.split(",")):
        if not item:
            continue
        cur, sep, rate = (x.strip() for x in item.partition("="))
        if not sep or len(cur) != 3 or not cur.isalpha() or not cur.isupper():
            raise ValueError(f"{key}: {item!r} is not CUR=rate (a 3-letter currency code in capitals)")
        try:
            value = float(rate)
        except ValueError:
            raise ValueError(f"{key}: {item!r}: the rate {rate!r} is not a number") from None
        if not value > 0 or value == float("inf"):
            raise ValueError(f"{key}: {item!r}: the rate must be a positive, finite number")
        if cur in out:
            raise ValueError(f"{key}: {cur} is given twice")
        out[cur] = value
    return out
