"""Planning benchmark inputs: real market curves, a documented hardware catalog, a seeded workload generator.

Hardware figures (board power while busy is TDP x a utilisation factor per job kind):

| type | TDP [W] | memory [GB] | relative throughput | source |
|---|---|---|---|---|
| H100 SXM5 | 700 | 80 | 1.00 (reference) | NVIDIA H100 Tensor Core GPU datasheet (SXM5: up to 700 W, 80 GB HBM3, 989 TFLOPS BF16 dense) |
| H200 SXM | 700 | 141 | 1.15 | NVIDIA H200 datasheet (up to 700 W, 141 GB HBM3e at 4.8 TB/s; same BF16 peak as H100, ~1.4x memory bandwidth) |
| A100 SXM4 80GB | 400 | 80 | 0.40 | NVIDIA A100 datasheet (400 W, 312 TFLOPS BF16 dense; 0.32 on paper, ~0.4 in MLPerf training ratios) |
| L40S | 350 | 48 | 0.35 | NVIDIA L40S datasheet (350 W, 48 GB GDDR6, 362 TFLOPS BF16 dense) |
| MI300X | 750 | 192 | 1.10 | AMD Instinct MI300X datasheet (750 W OAM, 192 GB HBM3, 1307 TFLOPS BF16 dense; achieved ~1.1x H100) |
| Ascend 910B | 400 (estimate) | 64 | 0.35 (estimate) | press reports (~400 W, 64 GB HBM2e, ~320 TFLOPS FP16); no public datasheet |

Relative throughputs are our planning assumptions from those peak figures, not measurements. The busy-power
factor for training (0.95) follows the ~693 W of 700 W an H200 drew in a bf16 training loop on this
project's machines (../shared/RUNTIME-NOTES.md); rendering 0.75 and batch inference 0.6 are assumptions.

Workload parameters (all drawn from ``numpy.random.default_rng(seed)``):

- submissions released uniformly over the first day (hourly slots 0..23);
- kind: training 30 %, rendering 30 %, batch inference 40 %;
- GPUs: 2**k with P(k) proportional to 0.5**k, k = 0..6 (1 to 64, heavy-tailed);
- run time on the reference H100 [h]: lognormal, median training 8, rendering 2, inference 1 (sigma 1),
  clipped to [10 min, 48 h];
- slack: uniform integer 0..72 h; the deadline is release + H100 run time + slack, capped at the horizon end;
- memory per GPU [GB]: training 40..120, rendering 16..40, inference 20..80 (uniform) -> hardware eligibility;
- interruptible: training 50 %, rendering 30 % (min chunk 2 h, 1 h checkpoint/restore overhead);
- on a grid of ``slot_minutes`` < 60 the hourly curves are held over the hour's slots (as the planner holds an
  hourly market series), run times round up to whole slots and releases, slack, chunks and overheads keep their
  lengths in hours, so that 15- and 60-minute plans of the same workload compare;
- job arrays: rendering and inference submissions are arrays of identical tasks with probability 0.5
  (size 1 + geometric, mean 4), which the planner aggregates into classes;
- home region uniform; 20 % of jobs are resident (home region only); preferred hardware H100 when eligible.

Fleet: per region and hardware type ``max(64, ceil(2 * GPU-hours demanded / (24 h * regions * types)))`` GPUs;
power budget 75 % of the facility draw of the whole inventory at TDP (so power binds in cheap hours);
PUE DE 1.25, FR 1.20, ES 1.30, FI 1.10, PL 1.35, BE 1.25, CH 1.20 (assumptions within the 1.1-1.6 range of
operator surveys).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer import HardwareType, Job, Objective, Problem, Region

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("GRIDSHIFT_SHARED_DATA", REPO / ".." / "shared" / "data")) / "harmonized"

CATALOG: list[dict] = [
    {"name": "H100", "tdp_w": 700, "memory_gb": 80, "relative_throughput": 1.00},
    {"name": "H200", "tdp_w": 700, "memory_gb": 141, "relative_throughput": 1.15},
    {"name": "A100", "tdp_w": 400, "memory_gb": 80, "relative_throughput": 0.40},
    {"name": "L40S", "tdp_w": 350, "memory_gb": 48, "relative_throughput": 0.35},
    {"name": "MI300X", "tdp_w": 750, "memory_gb": 192, "relative_throughput": 1.10},
    {"name": "Ascend910B", "tdp_w": 400, "memory_gb": 64, "relative_throughput": 0.35},
]
PUE = {"DE": 1.25, "FR": 1.20, "ES": 1.30, "FI": 1.10, "PL": 1.35, "BE": 1.25, "CH": 1.20}
BUSY = {"training": 0.95, "rendering": 0.75, "inference": 0.60}


def hardware_from_dicts(rows: list[dict]) -> tuple[HardwareType, ...]:
    """Hardware types from catalog rows ``{name, tdp_w, memory_gb, relative_throughput}``.

    Raises
    ------
    ValueError
        Naming the row and field when one is missing or not positive.
    """
    out = []
    for i, row in enumerate(rows):
        for key in ("name", "tdp_w", "memory_gb", "relative_throughput"):
            if key not in row:
                raise ValueError(f"catalog row {i}: missing field {key!r}")
        for key in ("tdp_w", "memory_gb", "relative_throughput"):
            if not float(row[key]) > 0:
                raise ValueError(f"catalog row {i} ({row['name']}): {key} must be > 0")
        out.append(
            HardwareType(
                str(row["name"]),
                float(row["memory_gb"]),
                float(row["tdp_w"]) / 1000.0,
                float(row["relative_throughput"]),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Curves:
    """Hourly price [EUR/MWh] and carbon intensity [g/kWh] per region, UTC index."""

    price: pd.DataFrame
    carbon: pd.DataFrame


def read_curves(data: Path, regions: list[str], year: int | None = None) -> Curves:
    """Read ``{ZONE}_hourly.csv.gz`` for ``regions`` from the harmonized folder."""
    price, carbon = {}, {}
    for zone in regions:
        path = data / f"{zone}_hourly.csv.gz"
        if not path.exists():
            raise FileNotFoundError(f"no market file for region {zone}: {path}")
        df = pd.read_csv(path, usecols=["timestamp_utc", "price_eur_mwh", "carbon_intensity_g_per_kwh"])
        idx = pd.to_datetime(df["timestamp_utc"], utc=True)
        s = df.set_index(idx)
        if year is not None:
            s = s[(s.index >= f"{year - 1}-12-01") & (s.index < f"{year + 1}-01-15")]
        price[zone] = s["price_eur_mwh"].astype(float)
        carbon[zone] = s["carbon_intensity_g_per_kwh"].astype(float)
    return Curves(pd.DataFrame(price), pd.DataFrame(carbon))


def window(
    curves: Curves, start: datetime, hours: int, forecast: str = "realised"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Price and carbon for ``hours`` from ``start``: realised, or a naive forecast.

    ``naive``: the day-ahead price is known for the first 24 h, later days repeat that day's profile;
    carbon intensity repeats the 24 h before ``start`` (persistence), as a planner would know at ``start``.
    """
    idx = pd.date_range(start, periods=hours, freq="h", tz=UTC)
    price = curves.price.reindex(idx)
    carbon = curves.carbon.reindex(idx)
    if forecast == "realised":
        return price, carbon
    if forecast != "naive":
        raise ValueError(f"unknown forecast {forecast!r}; valid: naive, realised")
    first_day = price.iloc[:24].to_numpy()
    tiled = np.resize(first_day, (hours, first_day.shape[1])) if hours > 24 else first_day[:hours]
    prev = curves.carbon.reindex(pd.date_range(start - timedelta(hours=24), periods=24, freq="h", tz=UTC))
    tiled_c = np.resize(prev.to_numpy(), (hours, prev.shape[1]))
    return pd.DataFrame(tiled, index=idx, columns=price.columns), pd.DataFrame(
        tiled_c, index=idx, columns=carbon.columns
    )


@dataclass(frozen=True, slots=True)
class Spec:
    """One generated job before it is bound to a horizon."""

    job_id: str
    kind: str
    gpus: int
    ref_hours: float
    release: int
    slack_h: int
    memory_gb: float
    interruptible: bool
    home: str
    resident: bool


def generate(n_jobs: int, regions: list[str], seed: int) -> list[Spec]:
    """Seeded workload of ``n_jobs`` jobs (see the module docstring for the parameters)."""
    rng = np.random.default_rng(seed)
    kinds = np.array(["training", "rendering", "inference"])
    median = {"training": 8.0, "rendering": 2.0, "inference": 1.0}
    mem = {"training": (40, 120), "rendering": (16, 40), "inference": (20, 80)}
    p_k = 0.5 ** np.arange(7)
    p_k /= p_k.sum()
    out: list[Spec] = []
    sub = 0
    while len(out) < n_jobs:
        kind = str(rng.choice(kinds, p=[0.3, 0.3, 0.4]))
        gpus = int(2 ** rng.choice(7, p=p_k))
        hours = float(np.clip(median[kind] * math.exp(rng.normal(0, 1)), 1 / 6, 48))
        release = int(rng.integers(0, 24))
        slack = int(rng.integers(0, 73))
        memory = float(rng.uniform(*mem[kind]))
        intr = bool(rng.random() < {"training": 0.5, "rendering": 0.3, "inference": 0.0}[kind])
        home = str(rng.choice(regions))
        resident = bool(rng.random() < 0.2)
        size = 1
        if kind != "training" and rng.random() < 0.5:
            size = 1 + int(rng.geometric(1 / 3))
        for k in range(min(size, n_jobs - len(out))):
            out.append(Spec(f"s{sub}-{k}", kind, gpus, hours, release, slack, memory, intr, home, resident))
        sub += 1
    return out


def build_problem(
    specs: list[Spec],
    hardware: tuple[HardwareType, ...],
    price: pd.DataFrame,
    carbon: pd.DataFrame,
    start: datetime,
    objective: Objective,
    fleet_jobs: int | None = None,
    slot_minutes: int = 60,
) -> Problem:
    """Problem over ``len(price)`` hourly curves held on slots of ``slot_minutes`` (a divisor of 60); fleet sized
    from ``specs`` (or ``fleet_jobs`` of them)."""
    if slot_minutes <= 0 or 60 % slot_minutes:
        raise ValueError(f"slot_minutes must divide 60, got {slot_minutes}")
    per_h = 60 // slot_minutes
    price, carbon = held(price, per_h), held(carbon, per_h)
    T = len(price)
    regions = list(price.columns)
    jobs = []
    gpu_hours = 0.0
    for s in specs:
        dur = {
            h.name: max(1, math.ceil(s.ref_hours * per_h / h.relative_throughput - 1e-9))
            for h in hardware
            if h.memory_gb >= s.memory_gb
        }
        if not dur:
            dur = {}
        power = {h.name: h.power_kw_per_gpu * BUSY[s.kind] for h in hardware}
        h100 = max(1, math.ceil(s.ref_hours * per_h - 1e-9))
        release = s.release * per_h
        deadline = min(T, release + h100 + s.slack_h * per_h)
        preferred = "H100" if "H100" in dur else (min(dur, key=lambda h: dur[h]) if dur else None)
        jobs.append(
            Job(
                s.job_id,
                s.gpus,
                dur,
                release,
                deadline,
                power_kw_per_gpu=power,
                memory_gb_per_gpu=s.memory_gb,
                allowed_regions=(s.home,) if s.resident else None,
                home_region=s.home,
                preferred_hardware=preferred,
                interruptible=s.interruptible,
                min_chunk_slots=2 * per_h,
                checkpoint_overhead_slots=per_h,
            )
        )
        gpu_hours += s.gpus * s.ref_hours
    if fleet_jobs:
        gpu_hours *= fleet_jobs / max(1, len(specs))
    per = max(64, math.ceil(2 * gpu_hours / (24 * len(regions) * len(hardware))))
    regs = []
    for z in regions:
        pue = PUE.get(z, 1.25)
        full_kw = sum(per * h.power_kw_per_gpu for h in hardware) * pue
        regs.append(
            Region(
                z,
                tuple(price[z].to_numpy(dtype=float)),
                tuple(carbon[z].to_numpy(dtype=float)),
                tuple([0.75 * full_kw] * T),
                {h.name: per for h in hardware},
                pue=pue,
            )
        )
    return Problem(start, slot_minutes, T, tuple(regs), hardware, tuple(jobs), objective=objective)


def held(curve: pd.DataFrame, per_hour: int) -> pd.DataFrame:
    """An hourly curve on slots of ``60 / per_hour`` minutes, each hour's value held over its slots."""
    if per_hour == 1:
        return curve
    idx = pd.date_range(curve.index[0], periods=len(curve) * per_hour, freq=f"{60 // per_hour}min")
    return pd.DataFrame(np.repeat(curve.to_numpy(), per_hour, axis=0), index=idx, columns=curve.columns)


def with_curves(problem: Problem, price: pd.DataFrame, carbon: pd.DataFrame) -> Problem:
    """Same fleet and jobs with other (hourly) price and carbon curves (e.g. forecast instead of realised)."""
    per_h = 60 // problem.slot_minutes
    price, carbon = held(price, per_h), held(carbon, per_h)
    regs = tuple(
        Region(
            r.name,
            tuple(price[r.name].to_numpy(dtype=float)),
            tuple(carbon[r.name].to_numpy(dtype=float)),
            r.power_budget_kw,
            r.inventory,
            r.pue,
            r.base_load_kw,
            r.inventory_per_slot,
            r.currency,
        )
        for r in problem.regions
    )
    return Problem(
        problem.start,
        problem.slot_minutes,
        problem.n_slots,
        regs,
        problem.hardware,
        problem.jobs,
        problem.objective,
        problem.currency,
        problem.fx_rates,
        problem.cost_scale,
    )


def start_of(day: str) -> datetime:
    """Aware UTC datetime of a ``YYYY-MM-DD`` string."""
    return datetime.fromisoformat(day).replace(tzinfo=UTC)


def add_workload_args(ap, *, jobs: int, slot_minutes: bool = False) -> None:
    """The workload options the planner probes share (data, regions, jobs, seed, start, days[, slot minutes])."""
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="harmonized data folder")
    ap.add_argument("--regions", default="DE,FR,ES,FI,PL")
    ap.add_argument("--jobs", type=int, default=jobs)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", default="2022-03-01")
    ap.add_argument("--days", type=int, default=4)
    if slot_minutes:
        ap.add_argument("--slot-minutes", type=int, default=15, choices=[5, 10, 15, 20, 30, 60])


def workload_problem(args, objective: Objective, slot_minutes: int = 60) -> Problem:
    """The seeded workload of :func:`add_workload_args`'s options on the realised curves, as one Problem."""
    regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    if not Path(args.data).exists():
        raise SystemExit(f"data folder {args.data} not found (set --data or GRIDSHIFT_SHARED_DATA)")
    curves = read_curves(Path(args.data), regions, year=int(args.start[:4]))
    start = start_of(args.start)
    price, carbon = window(curves, start, args.days * 24, "realised")
    return build_problem(generate(args.jobs, regions, args.seed), hardware_from_dicts(CATALOG), price, carbon, start,
                         objective, slot_minutes=getattr(args, "slot_minutes", slot_minutes))
