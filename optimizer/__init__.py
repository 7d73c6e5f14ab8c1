"""Gridshift optimizer: Problem in, Plan out (pure library: stdlib, ortools, numpy, pandas).

Every solver and baseline has the signature ``solve(problem, params) -> Plan``; see ``SOLVERS``.
"""

from optimizer.check import CheckReport, check_plan
from optimizer.plan import Assignment, Chunk, Plan, PlanStatus, SolveStats, Unplanned, UnplannedReason
from optimizer.problem import (
    HardwareType,
    Job,
    Objective,
    ObjectiveKind,
    Problem,
    Region,
    SolveParams,
    durations_from_throughput,
)
from optimizer.registry import SOLVERS, get_solver, register, solve

__all__ = [
    "SOLVERS",
    "Assignment",
    "CheckReport",
    "Chunk",
    "HardwareType",
    "Job",
    "Objective",
    "ObjectiveKind",
    "Plan",
    "PlanStatus",
    "Problem",
    "Region",
    "SolveParams",
    "SolveStats",
    "Unplanned",
    "UnplannedReason",
    "check_plan",
    "durations_from_throughput",
    "get_solver",
    "register",
    "solve",
]
