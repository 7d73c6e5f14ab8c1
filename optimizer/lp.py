"""LP lower bound of the aggregated time-indexed model by column generation (GLOP).

Master LP over job classes: ``x[c, o] >= 0`` jobs of class ``c`` on option ``o``, ``left[c] >= 0``;
``sum_o x[c, o] + left[c] = n_c``; GPUs per (region, hardware, slot) and facility power per
(region, slot) within capacity. Its duals price capacity; pricing every option of every job at those
prices is exactly the Lagrangian subproblem of ``bound.evaluate``, so ``L(duals)`` is a valid lower bound
after every round, and the columns with negative reduced cost are added until none is left (then the
bound equals the LP optimum of the full model). Only options ever priced in are built, which keeps the
LP small where solving the full relaxation directly does not finish.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from ortools.linear_solver import linear_solver_pb2, pywraplp

from optimizer.bound import Choice, Multipliers, evaluate
from optimizer.heuristic import option_objective
from optimizer.tables import Tables


class _Master:
    def __init__(self, tb: Tables, cls: np.ndarray, rep: np.ndarray, counts: np.ndarray) -> None:
        self.tb, self.cls, self.rep, self.counts = tb, cls, rep, counts
        self.lp = pywraplp.Solver.CreateSolver("GLOP")
        # dual simplex without presolve re-solves the growing master about twice as fast here
        self.lp.SetSolverSpecificParametersAsString("use_preprocessing: false use_dual_simplex: true")
        self.obj = self.lp.Objective()
        self.obj.SetMinimization()
        self.conv = []
        for c, n in enumerate(counts):
            row = self.lp.Constraint(float(n), float(n), f"jobs[c={c}]")
            left = self.lp.NumVar(0.0, float(n), f"left_out[c={c}]")
            row.SetCoefficient(left, 1.0)
            self.obj.SetCoefficient(left, float(tb.penalty[rep[c]]))
            self.conv.append(row)
        self.gpu_rows: dict[tuple[int, int, int], pywraplp.Constraint] = {}
        self.kw_rows: dict[tuple[int, int], pywraplp.Constraint] = {}
        self.columns: set[tuple[int, ...]] = set()
        self.column_vars: list[tuple[tuple[int, ...], pywraplp.Variable]] = []

    def add(self, ch: Choice, rows: np.ndarray) -> int:
        """Add the options ``ch`` of job ``rows`` as columns of their classes; returns how many were new."""
        return self.add_options(ch, np.asarray(rows), np.arange(len(ch.r)))

    def add_options(self, ch: Choice, pick: np.ndarray, job_rows: np.ndarray) -> int:
        """Add options ``ch[pick]`` (option ``k`` belongs to job row ``job_rows[k]``); returns how many were new."""
        tb = self.tb
        obj = option_objective(tb, ch, rows=job_rows)
        added = 0
        for k in pick:
            k = int(k)
            row = int(job_rows[k])
            if ch.r[k] < 0:
                continue
            c = int(self.cls[row])
            key = (c, int(ch.r[k]), int(ch.h[k]), int(ch.s1[k]), int(ch.l1[k]), int(ch.s2[k]), int(ch.l2[k]))
            if key in self.columns:
                continue
            self.columns.add(key)
            _, r, h, s1, l1, s2, l2 = key
            var = self.lp.NumVar(0.0, float(self.counts[c]), f"x[c={c},r={r},h={h},s={s1}]")
            self.column_vars.append((key, var))
            self.obj.SetCoefficient(var, float(obj[k]))
            self.conv[c].SetCoefficient(var, 1.0)
            g = float(tb.g[row])
            kw = tb.power_kw(row, r, h)
            # the bound's two-chunk relaxation may overlap its chunks: coefficients add up per slot
            slots = np.concatenate((np.arange(s1, s1 + l1), np.arange(s2, s2 + l2)))
            ts, times = np.unique(slots, return_counts=True)
            for t, k in zip(ts.tolist(), times.tolist(), strict=True):
                grow = self.gpu_rows.get((r, h, t))
                if grow is None:
                    grow = self.gpu_rows[(r, h, t)] = self.lp.Constraint(
                        -self.lp.infinity(), float(tb.cap[r, h, t])
                    )
                grow.SetCoefficient(var, g * k)
                krow = self.kw_rows.get((r, t))
                if krow is None:
                    krow = self.kw_rows[(r, t)] = self.lp.Constraint(
                        -self.lp.infinity(), float(tb.kw_cap[r, t])
                    )
                krow.SetCoefficient(var, kw * k)
            added += 1
        return added

    def _response(self) -> linear_solver_pb2.MPSolutionResponse:
        """The last solution in one call (reading values one variable at a time costs more than a round)."""
        response = linear_solver_pb2.MPSolutionResponse()
        self.lp.FillSolutionResponseProto(response)
        return response

    def primal(self) -> np.ndarray:
        """Columns with a positive LP value: rows ``(class, r, h, s1, l1, s2, l2)`` and their values."""
        values = np.asarray(self._response().variable_value)
        at = np.array([var.index() for _, var in self.column_vars], dtype=np.int64)
        x = values[at] if len(at) else np.zeros(0)
        pos = np.flatnonzero(x > 1e-7)
        table = np.array([self.column_vars[k][0] for k in pos], dtype=np.int64).reshape(-1, 7)
        return np.column_stack((table.astype(float), x[pos]))

    def duals(self) -> tuple[Multipliers, np.ndarray]:
        dual = np.asarray(self._response().dual_value)
        m = Multipliers.zeros(self.tb)
        for rows, target in ((self.gpu_rows, m.lam), (self.kw_rows, m.mu)):
            if rows:
                keys = np.array(list(rows.keys()), dtype=np.int64)
                at = np.array([row.index() for row in rows.values()], dtype=np.int64)
                target[tuple(keys.T)] = np.maximum(0.0, -dual[at])
        pi = dual[np.array([row.index() for row in self.conv], dtype=np.int64)]
        return m, pi


def column_generation(
    tb: Tables,
    cls: np.ndarray,
    rep: np.ndarray,
    counts: np.ndarray,
    seeds: list[Choice],
    *,
    time_limit_s: float,
    max_rounds: int = 50,
    per_class: int = 4,
    rel_tol: float = 3e-5,
) -> tuple[float, Multipliers, dict]:
    """Lower bound and capacity prices from the LP of the aggregated model.

    Parameters
    ----------
    tb : Tables
        Problem arrays.
    cls, rep, counts : numpy.ndarray
        Class of each job row, a representative row and the size of each class.
    seeds : list of Choice
        Plans whose options start the master LP.
    time_limit_s : float
        Wall-clock limit [s].
    max_rounds : int
        Pricing rounds.
    per_class : int
        Most columns added per class and round.
    rel_tol : float
        Stop once the restricted LP value is within this fraction of the best bound.

    Returns
    -------
    tuple
        ``(best valid bound [objective units], multipliers of that bound, info)``; ``info["primal"]`` holds
        the last restricted LP solution (see ``_Master.primal``), ``info["columns_table"]`` every column.
    """
    t0 = time.perf_counter()
    master = _Master(tb, cls, rep, counts)
    is_rep = np.zeros(tb.J, dtype=bool)
    is_rep[rep] = True
    for seed in seeds:
        master.add(seed, np.arange(tb.J))
    best, best_m = -np.inf, Multipliers.zeros(tb)
    info: dict[str, Any] = {"rounds": 0, "columns": 0, "lp_value": None, "converged": False, "primal": None}
    trace: list[tuple[float, float]] = []
    info["trace"] = trace
    recent: list[Multipliers] = []  # duals of every round (the primal heuristics price with the last few)
    info["recent_duals"] = recent
    for _ in range(max_rounds):
        remaining = time_limit_s - (time.perf_counter() - t0)
        if remaining <= 0:
            break
        master.lp.SetTimeLimit(int(max(1, remaining) * 1000))
        status = master.lp.Solve()
        if status != pywraplp.Solver.OPTIMAL:
            break
        lp_value = float(master.obj.Value())
        info["lp_value"] = lp_value
        info["primal"] = master.primal()
        m, pi = master.duals()
        found: list = []
        value, _, _ = evaluate(tb, m, collect=found)
        info["rounds"] = int(info["rounds"] or 0) + 1
        trace.append((round(lp_value, 4), round(value, 4)))
        if value > best:
            best, best_m = value, m
        recent.append(m)
        if lp_value - best <= rel_tol * max(1.0, abs(lp_value)):
            info["converged"] = True
            break
        # an option prices in when its priced value is below its class's convexity dual;
        # up to ``per_class`` (region, hardware) pairs per class and round
        rows, r, h, s1, l1, s2, l2, val = (np.concatenate(x) for x in zip(*found, strict=True))
        c = cls[rows]
        keep = is_rep[rows] & np.isfinite(val) & (val < pi[c] - 1e-9 * np.maximum(1.0, np.abs(pi[c])))
        idx = np.flatnonzero(keep)
        idx = idx[np.lexsort((val[idx], c[idx]))]
        rank = np.arange(len(idx)) - np.searchsorted(c[idx], c[idx], side="left")
        idx = idx[rank < per_class]
        cand = Choice(r, h, s1, l1, s2, l2)
        if len(idx) == 0 or master.add_options(cand, idx, rows) == 0:
            info["converged"] = True
            break
    info["columns"] = len(master.columns)
    info["columns_table"] = np.array(sorted(master.columns), dtype=np.int64).reshape(-1, 7)
    return float(best), best_m, info
