"""The result of a solve: assignments, jobs left out with their reason, objective, bound and statistics."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class UnplannedReason(StrEnum):
    """Why a job is not in the plan."""

    INVALID_JOB = "invalid_job"  # non-positive GPUs or durations, unknown fields
    DEADLINE_BEFORE_RELEASE = "deadline_before_release"
    OUTSIDE_HORIZON = "outside_horizon"
    NO_ELIGIBLE_REGION = "no_eligible_region"
    NO_ELIGIBLE_HARDWARE = "no_eligible_hardware"
    WINDOW_TOO_SHORT = "window_too_short"
    POWER_BUDGET_TOO_LOW = "power_budget_too_low"
    INVALID_PRICES = "invalid_prices"  # NaN price or carbon intensity over every possible run
    CAPACITY = "capacity"  # feasible alone, but no room left beside the other jobs
    QUOTA = "quota"  # its tenant's GPU-hours or GPUs-at-once quota does not cover it (detail: what is short)
    BUDGET = "budget"  # its tenant's remaining cost, energy or carbon budget does not cover it (detail: amount short)
    NOT_SOLVED = "not_solved"  # the solver stopped before finding a plan


class PlanStatus(StrEnum):
    """Outcome of a solve."""

    OPTIMAL = "optimal"  # proven optimal for the planner's model
    FEASIBLE = "feasible"  # a checked plan, gap reported
    NO_SOLUTION = "no_solution"  # the time limit ran out before any plan
    INVALID = "invalid"  # the model was rejected (see stats)
    EMPTY = "empty"  # nothing to plan


@dataclass(frozen=True, slots=True)
class Chunk:
    """One contiguous run ``[start_slot, end_slot)`` [slots]."""

    start_slot: int
    end_slot: int

    @property
    def length_slots(self) -> int:
        """Run length [slots]."""
        return self.end_slot - self.start_slot


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where and when one job runs.

    Parameters
    ----------
    job_id : str
        The job.
    region, hardware : str
        Where it runs and on what.
    chunks : tuple of Chunk
        Runs in time order; one chunk unless the job is interruptible.
    energy_kwh : float
        Facility energy including PUE [kWh].
    cost : float
        Energy cost [problem currency].
    carbon_kg : float
        Emissions [kgCO2eq].
    """

    job_id: str
    region: str
    hardware: str
    chunks: tuple[Chunk, ...]
    energy_kwh: float
    cost: float
    carbon_kg: float

    @property
    def start_slot(self) -> int:
        """First slot it runs in [slot]."""
        return self.chunks[0].start_slot

    @property
    def end_slot(self) -> int:
        """Slot after its last running slot [slot]."""
        return self.chunks[-1].end_slot


@dataclass(frozen=True, slots=True)
class Unplanned:
    """A job left out of the plan, with the reason."""

    job_id: str
    reason: UnplannedReason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class SolveStats:
    """What the solve did.

    Parameters
    ----------
    wall_s : float
        Wall-clock time of the whole solve [s].
    num_jobs, num_classes, num_options : int
        Jobs, aggregated job classes and (region, hardware, start) options after pruning.
    cp_status : str
        CP-SAT status name, or ``""`` when CP-SAT was not used.
    phases : Mapping[str, float]
        Wall-clock time per phase [s].
    notes : tuple of str
        Human-readable remarks (what was pruned, which path ran).
    """

    wall_s: float = 0.0
    num_jobs: int = 0
    num_classes: int = 0
    num_options: int = 0
    cp_status: str = ""
    phases: Mapping[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """A plan for one problem.

    Parameters
    ----------
    solver : str
        Name of the solver/baseline that produced it.
    status : PlanStatus
        Outcome.
    assignments : tuple of Assignment
        Planned jobs.
    unplanned : tuple of Unplanned
        Every job not planned, with its reason (nothing is dropped silently).
    objective : float
        Objective value of the planned jobs [currency, kgCO2eq, or currency-equivalent].
    best_bound : float or None
        Lower bound on the objective of any plan that plans the same jobs, when known (never above ``objective``).
    gap_pct : float or None
        The solver's gap: ``100 * (penalised - penalised_bound) / penalised`` when a bound is known, where
        ``penalised`` is the objective plus the penalty of every job left out beside the others; the same as
        ``100 * (objective - best_bound) / objective`` when no job is left out [%].
    cost, carbon_kg, energy_kwh : float
        Totals of the planned jobs [currency], [kgCO2eq], [kWh].
    stats : SolveStats
        Solve statistics.
    penalised_bound : float or None
        Lower bound on what the planner minimises, the objective plus the penalty of each job left out for capacity
        (a penalty outweighs any job's own objective, so planning more jobs comes first), when known.
    """

    solver: str
    status: PlanStatus
    assignments: tuple[Assignment, ...]
    unplanned: tuple[Unplanned, ...]
    objective: float
    best_bound: float | None
    gap_pct: float | None
    cost: float
    carbon_kg: float
    energy_kwh: float
    stats: SolveStats = field(default_factory=SolveStats)
    penalised_bound: float | None = None

    def assignment_of(self, job_id: str) -> Assignment | None:
        """The assignment of ``job_id``, or None."""
        for a in self.assignments:
            if a.job_id == job_id:
                return a
        return None

    def unplanned_reasons(self) -> dict[str, UnplannedReason]:
        """``{job_id: reason}`` of every job left out."""
        return {u.job_id: u.reason for u in self.unplanned}


def gap_pct(objective: float, bound: float | None) -> float | None:
    """Relative gap ``100 * (objective - bound) / |objective|`` [%], 0 when both are 0."""
    if bound is None or not (math.isfinite(bound) and math.isfinite(objective)):
        return None
    if abs(objective) < 1e-12:
        return 0.0 if abs(bound) < 1e-9 else None
    return max(0.0, 100.0 * (objective - bound) / abs(objective))
