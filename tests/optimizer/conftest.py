"""Small problems with known optima for the optimizer tests."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from optimizer import HardwareType, Job, Problem, Region, SolveParams

START = datetime(2022, 3, 1, tzinfo=UTC)
H100 = HardwareType("H100", memory_gb=80, power_kw_per_gpu=0.7, relative_throughput=1.0)
L40S = HardwareType("L40S", memory_gb=48, power_kw_per_gpu=0.35, relative_throughput=0.4)


def region(name, prices, carbon=None, *, gpus=8, budget_kw=100.0, pue=1.0, **kw) -> Region:
    """A region with flat carbon and budget unless given."""
    n = len(prices)
    return Region(
        name=name,
        price_per_mwh=tuple(float(p) for p in prices),
        carbon_g_per_kwh=tuple(float(c) for c in (carbon if carbon is not None else [300.0] * n)),
        power_budget_kw=tuple(
            float(b) for b in (budget_kw if isinstance(budget_kw, list) else [budget_kw] * n)
        ),
        inventory={"H100": gpus} if isinstance(gpus, int) else gpus,
        pue=pue,
        **kw,
    )


def job(job_id, *, gpus=1, dur=2, rel=0, dl=None, n_slots=8, hw="H100", **kw) -> Job:
    durations = dur if isinstance(dur, dict) else {hw: dur}
    return Job(job_id, gpus, durations, rel, dl if dl is not None else n_slots, **kw)


def problem(regions, jobs, *, hardware=(H100,), **kw) -> Problem:
    return Problem(
        START, 60, len(regions[0].price_per_mwh), tuple(regions), tuple(hardware), tuple(jobs), **kw
    )


@pytest.fixture
def params() -> SolveParams:
    return SolveParams(time_limit_s=5.0, num_workers=2, random_seed=7)
