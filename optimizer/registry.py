"""Registry of solvers and baselines; all share ``solve(problem, params) -> Plan``.

Solvers are registered by name with :func:`register`, here for the built-in ones; :func:`get_solver` looks one up
and its error lists the valid names. ``SOLVERS`` is a read-only view of the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from optimizer.baselines import solve_best_window, solve_greedy, solve_oracle, solve_run_now
from optimizer.plan import Plan
from optimizer.problem import Problem, SolveParams
from optimizer.solve import solve_gridshift

Solver = Callable[[Problem, SolveParams | None], Plan]

_REGISTRY: dict[str, Solver] = {}
SOLVERS: Mapping[str, Solver] = MappingProxyType(_REGISTRY)


def register(name: str, solver: Solver) -> Solver:
    """Register ``solver`` under ``name`` (a name is registered once); returns ``solver``."""
    if not name or not name.isidentifier():
        raise ValueError(f"solver name {name!r} must be a non-empty identifier")
    if name in _REGISTRY and _REGISTRY[name] is not solver:
        raise ValueError(f"solver {name!r} is already registered")
    _REGISTRY[name] = solver
    return solver


def get_solver(name: str) -> Solver:
    """Solver by name; the error lists the valid names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown solver {name!r}; valid: {', '.join(sorted(_REGISTRY))}") from None


def solve(problem: Problem, params: SolveParams | None = None, *, solver: str = "gridshift") -> Plan:
    """Solve ``problem`` with the named solver (default ``gridshift``)."""
    return get_solver(solver)(problem, params)


for _name, _solver in (
    ("run_now", solve_run_now),
    ("best_window", solve_best_window),
    ("greedy", solve_greedy),
    ("gridshift", solve_gridshift),
    ("oracle", solve_oracle),
):
    register(_name, _solver)
