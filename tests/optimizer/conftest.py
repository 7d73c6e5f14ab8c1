"""Small problems with known optima for the optimizer tests."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime

import numpy as np
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


def tiny_random(rng: np.random.Generator) -> Problem:
    """Four H100 jobs of 1-2 GPUs and 1-3 slots in two 6-slot regions of 4 GPUs and 2 kW, random prices."""
    regions = [region(n, rng.integers(5, 100, 6), gpus=4, budget_kw=2.0) for n in ("A", "B")]
    jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2])), dur=int(rng.integers(1, 4)), n_slots=6) for i in range(4)]
    return problem(regions, jobs)


def brute_force(pb: Problem) -> float:
    """Cheapest plan of a problem like :func:`tiny_random`'s by enumeration (contiguous runs, every job planned,
    cost objective, H100 only); the GPU and power limits are read from the regions."""
    options = []
    for j in pb.jobs:
        opts = []
        for r in pb.regions:
            for hw, d in j.duration_slots.items():
                for s in range(j.release_slot, j.deadline_slot - d + 1):
                    opts.append((r, hw, s, d))
        options.append(opts)
    best = math.inf
    for combo in itertools.product(*options):
        gpu: dict = {}
        kw: dict = {}
        cost = 0.0
        for j, (r, hw, s, d) in zip(pb.jobs, combo, strict=True):
            p = j.gpus * pb.job_power_kw_per_gpu(j, hw) * r.pue
            for t in range(s, s + d):
                gpu[(r.name, hw, t)] = gpu.get((r.name, hw, t), 0) + j.gpus
                kw[(r.name, t)] = kw.get((r.name, t), 0.0) + p
                cost += p * r.price_per_mwh[t] / 1000
        by_name = {r.name: r for r in pb.regions}
        if all(v <= by_name[n].inventory[hw] for (n, hw, _), v in gpu.items()) and all(
            v <= by_name[n].power_budget_kw[t] + 1e-9 for (n, t), v in kw.items()
        ):
            best = min(best, cost)
    return best


@pytest.fixture
def params() -> SolveParams:
    return SolveParams(time_limit_s=5.0, num_workers=2, random_seed=7)
