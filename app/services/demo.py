"""The demo fleet: five regions on real bidding zones, a mixed inventory, tenants, market data and jobs.

Market data:
* with ``data_dir`` (../shared/data/harmonized): real hourly prices, load, wind/solar forecasts, renewable share and
  carbon intensity of 2022, **replayed** onto the present: the series is shifted by a whole number of weeks so that
  weekdays line up, and stored with source ``harmonized-replay-2022``.
* without it: a synthetic scenario (source ``synthetic``) from a seeded generator: price [EUR/MWh] =
  base + daily swing * cos(2 pi (h - peak) / 24) + weekend dip + a midday solar dip + Gaussian noise (sd 8),
  carbon [g/kWh] follows the same shape around a zone mean; renewable share is its complement. Parameters are
  the per-zone tuples in ``SYNTHETIC`` below. It is clearly not real data.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.enums import SERIES_UNITS, Role, SeriesKind, WorkloadClass
from app.models import Region, Tenant
from app.services import auth, catalog, fleet, forecasts, jobs, market, planning

# code, name, zone, time zone, PUE, power budget [kW], residency tags, inventory {hw: GPUs}
REGIONS = [
    ("de-fra", "Frankfurt", "DE", "Europe/Berlin", 1.25, 900.0, ["eu", "de"], {"h100": 64, "a100": 32}),
    ("fr-par", "Paris", "FR", "Europe/Paris", 1.3, 700.0, ["eu", "fr"], {"h200": 32, "l40s": 48}),
    ("es-mad", "Madrid", "ES", "Europe/Madrid", 1.35, 600.0, ["eu"], {"mi300x": 32, "a100": 32}),
    ("fi-ham", "Hamina", "FI", "Europe/Helsinki", 1.1, 1200.0, ["eu", "nordic"], {"h100": 48, "h200": 32}),
    ("pl-waw", "Warsaw", "PL", "Europe/Warsaw", 1.4, 500.0, ["eu"], {"l40s": 32, "a100": 16, "ascend910b": 16}),
]
# zone: (price base, daily swing, carbon mean g/kWh, carbon swing)
SYNTHETIC = {"DE": (120, 45, 420, 120), "FR": (95, 35, 60, 25), "ES": (100, 50, 170, 70),
             "FI": (60, 25, 80, 30), "PL": (140, 40, 700, 80)}
REPLAY_YEAR = 2022
HISTORY_DAYS = 60  # enough for the default forecast models' shortest calibration windows
PUBLISHED_AHEAD = {SeriesKind.LOAD_FORECAST, SeriesKind.WIND_SOLAR_FORECAST}
# zone: typical load [MW] and wind + solar capacity factor scale [MW] of the synthetic regressors
SYNTHETIC_LOAD = {"DE": (55000, 30000), "FR": (50000, 12000), "ES": (28000, 15000), "FI": (9000, 3000),
                  "PL": (18000, 6000)}


@dataclass
class SeedResult:
    summary: str
    tokens: dict[str, str] = field(default_factory=dict)


def seed(session: Session, settings: Settings, *, data_dir: Path | None, seed: int = 7, n_jobs: int = 24,
         now: datetime | None = None) -> SeedResult:
    """Idempotent: an existing fleet is updated, tenants and tokens are only created once."""
    now = (now or datetime.now(UTC)).replace(minute=0, second=0, microsecond=0)
    n_hardware, _new_profiles = catalog.import_catalog(session)  # sourced figures + measured profiles
    for code, name, zone, tz, pue, budget, tags, inventory in REGIONS:
        fleet.upsert_region(session, code, dict(name=name, zone=zone, timezone=tz, pue=pue,
                                                power_budget_kw=budget, residency_tags=tags))
        for hw, n in inventory.items():
            fleet.set_inventory(session, code, hw, n)
        # The embedded runtime: local processes; GPU slots per hardware type stand for the region's inventory.
        fleet.upsert_cluster(session, f"{code}-local", code, "local", {
            "state_dir": str((settings.local_runtime_dir / code).resolve()),
            "gpus": {hw: list(range(n)) for hw, n in inventory.items()},
        })
    # A demand-response window: Warsaw curtails to 60 % tomorrow 17:00-20:00 UTC.
    pl = session.scalar(select(Region).where(Region.code == "pl-waw"))
    if pl is not None and not pl.overrides:
        start = (now + timedelta(days=1)).replace(hour=17)
        fleet.add_override(session, "pl-waw", start, start + timedelta(hours=3), 300.0, "demand response (demo)")

    tokens: dict[str, str] = {}
    for slug, operator, role in (("ops", True, Role.ADMIN), ("ml-platform", False, Role.ADMIN),
                                 ("render-farm", False, Role.MEMBER)):
        if session.scalar(select(Tenant.id).where(Tenant.slug == slug)) is None:
            t = auth.create_tenant(session, slug, is_operator=operator)
            _row, tokens[slug] = auth.issue_token(session, t, "demo", role)

    zones = sorted({r[2] for r in REGIONS})
    start, end = now - timedelta(days=HISTORY_DAYS), now + timedelta(days=3)
    if data_dir is not None:
        points = replay_harmonized(data_dir, zones, start, end)
    else:
        points = synthetic_series(zones, start, end, seed)
    # Realised values stop at now; only the TSOs' day-ahead load and wind/solar forecasts reach ahead.
    points = [p for p in points if p.ts < now or p.kind in PUBLISHED_AHEAD]
    n_points = market.store(session, points)

    rng = random.Random(seed)
    existing = session.scalar(select(func.count()).select_from(jobs.Job)) or 0
    n_new = 0
    if existing == 0 and n_jobs > 0:
        for slug, n_team in (("ml-platform", n_jobs - n_jobs // 2), ("render-farm", n_jobs // 2)):
            if n_team == 0:
                continue  # an empty batch is not a submission
            t = auth.get_tenant(session, slug)
            p = auth.Principal(t.id, t.slug, 0, "demo-seed", Role.ADMIN, t.is_operator)
            items = [_demo_job(rng, now, slug, i) for i in range(n_team)]
            _b, ids = jobs.submit_jobs(session, p, items, now=now)
            n_new += len(ids)
    session.commit()
    outcomes = forecasts.refresh_all(session, forecasts.FORECAST_KINDS, now=now, horizon_hours=settings.horizon_hours)
    record = planning.plan_fleet(session, settings, now=now, horizon_hours=settings.horizon_hours,
                                 objective=settings.objective, trigger="demo-seed")
    label = f"real {REPLAY_YEAR} data replayed from {data_dir}" if data_dir else "SYNTHETIC scenario (seeded)"
    summary = (f"demo fleet: {len(REGIONS)} regions, {n_hardware} hardware types; "
               f"{n_points} market points ({label}); {n_new} jobs; "
               f"{sum(o.error is None for o in outcomes)}/{len(outcomes)} forecasts; "
               f"plan {record.plan_id}: {record.n_assigned} assigned, {record.n_unplanned} left out")
    return SeedResult(summary, tokens)


def _demo_job(rng: random.Random, now: datetime, team: str, i: int) -> dict:
    cls = rng.choice([WorkloadClass.TRAINING, WorkloadClass.FINE_TUNING, WorkloadClass.BATCH_INFERENCE]
                     if team == "ml-platform" else [WorkloadClass.RENDERING, WorkloadClass.BATCH_INFERENCE])
    gpus = rng.choice([1, 2, 4, 8, 8, 16])
    hours = rng.uniform(1, 10)
    release = now + timedelta(hours=rng.randint(0, 6))
    slack = timedelta(hours=rng.randint(8, 40))
    return {
        "name": f"{team}-{cls.value}-{i:02d}", "workload_class": cls, "gpu_count": gpus,
        "reference_gpu_hours": round(gpus * hours, 1), "release_at": release,
        "deadline_at": release + timedelta(hours=math.ceil(hours * 3)) + slack,
        "command": "python -c \"import time; time.sleep(5); print('done')\"",
        "interruptible": rng.random() < 0.3, "home_region": "de-fra",
    }


def replay_harmonized(data_dir: Path, zones: list[str], start: datetime, end: datetime) -> list[market.Point]:
    """Real series of REPLAY_YEAR shifted by whole weeks onto [start, end)."""
    weeks = round((start - start.replace(year=REPLAY_YEAR)).days / 7)
    shift = timedelta(weeks=weeks)
    points: list[market.Point] = []
    for zone in zones:
        path = data_dir / f"{zone}_hourly.csv.gz"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no harmonized file for zone {zone}")
        src = market.read_csv(path, zone=zone, source=f"harmonized-replay-{REPLAY_YEAR}",
                              start=start - shift, end=end - shift)
        points.extend(market.Point(p.zone, p.kind, p.ts + shift, p.value, p.unit, p.source) for p in src)
    return points


def synthetic_series(zones: list[str], start: datetime, end: datetime, seed: int) -> list[market.Point]:
    rng = random.Random(seed)
    points: list[market.Point] = []
    for zone in zones:
        base, swing, ci_mean, ci_swing = SYNTHETIC[zone]
        ts = start
        while ts < end:
            h = ts.hour + 1  # roughly CET
            daily = math.cos(2 * math.pi * (h - 19) / 24)
            solar = -max(0.0, math.cos(2 * math.pi * (h - 13) / 24)) ** 3
            weekend = -15 if ts.weekday() >= 5 else 0
            price = base + swing * daily + 0.6 * swing * solar + weekend + rng.gauss(0, 8)
            ci = max(10.0, ci_mean + ci_swing * (0.6 * daily + 0.5 * solar) + rng.gauss(0, ci_swing * 0.1))
            share = min(1.0, max(0.0, 1 - ci / (ci_mean * 2.2)))
            load_mw, ws_mw = SYNTHETIC_LOAD[zone]
            load = load_mw * (1 + 0.12 * daily + 0.05 * weekend / 15) + rng.gauss(0, load_mw * 0.01)
            wind_solar = ws_mw * (0.35 - 0.3 * solar + 0.15 * math.sin(ts.timestamp() / 86400 / 3)) + rng.gauss(0, ws_mw * 0.03)
            for kind, value in ((SeriesKind.PRICE, price), (SeriesKind.CARBON_INTENSITY, ci),
                                (SeriesKind.RENEWABLE_SHARE, share), (SeriesKind.LOAD_FORECAST, load),
                                (SeriesKind.WIND_SOLAR_FORECAST, max(0.0, wind_solar))):
                points.append(market.Point(zone, kind, ts, round(value, 3), SERIES_UNITS[kind], "synthetic"))
            ts += timedelta(hours=1)
    return points
