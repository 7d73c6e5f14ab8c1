"""Registry of solvers and baselines; all share ``solve(problem, params) -> Plan``."""

from __future__ import annotations

from collections.abc import Callable

from optimizer.baselines import solve_best_window, solve_greedy, solve_oracle, solve_run_now
from optimizer.plan import Plan
from optimizer.problem import Problem, SolveParams
from optimizer.solve import solve_gridshift

Solver = Callable[[Problem, SolveParams | None], Plan]

SOLVERS: dict[str, Solver] = {
    "run_now": solve_run_now,
    "best_window": solve_best_window,
    "greedy": solve_greedy,
    "gridshift": solve_gridshift,
    "oracle": solve_oracle,
}


def get_solver(name: str) -> Solver:
    """Solver by name; the error lists the valid names."""
    try:
        return SOLVERS[name]
    except KeyError:
        raise KeyError(f"unknown solver {name!r}; valid: {', '.join(sorted(SOLVERS))}") from None


def solve(problem: Problem, params: SolveParams | None = None, *, solver: str = "gridshift") -> Plan:
    """Solve ``problem`` with the named solver (default ``gridshift``)."""
    return get_solver(solver)(problem, params)
