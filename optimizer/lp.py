"""LP lower bound of the aggregated time-indexed model by column generation (GLOP).

Master LP over job classes: ``x[c, o] >= 0`` jobs of class ``c`` on option ``o``, ``left[c] >= 0``;
``sum_o x[c, o] + left[c] = n_c``; GPUs per (region, hardware, slot) and facility power per
(region, slot) within capacity. Its duals price capacity; pricing every option of every job at those
prices is exactly the Lagrangian subproblem of ``bound.evaluate``, so ``L(duals)`` is a valid lower bound
after every round, and the columns with negative reduced cost are added until none is left (then the
bound equals the LP optimum of the full model). Only options ever priced in are built, which keeps the
LP small where solving the full relaxation directly does not finish.

Interruptible jobs of at most two chunks are also priced over every split of their work
(``optimizer.chunking``), so the bound holds for every plan ``check_plan`` accepts, not only for the model's
fixed halves, and the LP's columns (hence its roundings and dives) use the cheaper splits.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import numpy as np
from ortools.math_opt import callback_pb2, model_parameters_pb2, parameters_pb2, result_pb2, solution_pb2
from ortools.math_opt.core.python import solver as core_solver
from ortools.math_opt.elemental.python import enums
from ortools.math_opt.python import mathopt

from optimizer.blocks import block_sum, column_blocks, column_slots, row_starts, slot_block, spread
from optimizer.bound import Choice, Multipliers, evaluate
from optimizer.chunking import chunk_options
from optimizer.heuristic import option_objective
from optimizer.tables import Tables


class RestrictedMaster:
    """The restricted master LP in MathOpt (GLOP), re-solved from the last optimal basis after each round.

    Columns only ever get added, so the last optimal basis (new columns at their lower bound 0, the slacks of
    new rows basic) stays primal feasible and the primal simplex starts from it: at 1,000 jobs a round takes
    a few hundred iterations instead of the ~3,500 of a solve from scratch.
    """

    def __init__(self, tb: Tables, cls: np.ndarray, rep: np.ndarray, counts: np.ndarray) -> None:
        self.tb, self.cls, self.rep, self.counts = tb, cls, rep, counts
        self.model = mathopt.Model(name="master")
        self.obj = self.model.objective
        self.obj.is_maximize = False
        self.conv = []
        for c, n in enumerate(counts):
            row = self.model.add_linear_constraint(lb=float(n), ub=float(n), name=f"jobs[c={c}]")
            left = self.model.add_variable(lb=0.0, ub=float(n), name=f"left_out[c={c}]")
            row.set_coefficient(left, 1.0)
            self.obj.set_linear_coefficient(left, float(tb.penalty[rep[c]]))
            self.conv.append(row)
        self._conv_ids = np.array([row.id for row in self.conv], dtype=np.int64)
        # capacity rows per block of slots (``optimizer.blocks``): keys (r, h, block) and (r, block)
        self.starts = row_starts(tb.blocks, tb.T)
        self.block_of = slot_block(self.starts, tb.T)
        self.cap_b = block_sum(tb.cap, self.starts)
        self.kw_cap_b = block_sum(tb.kw_cap, self.starts)
        self.gpu_rows: dict[tuple[int, int, int], mathopt.LinearConstraint] = {}
        self.kw_rows: dict[tuple[int, int], mathopt.LinearConstraint] = {}
        self.columns: set[tuple[int, ...]] = set()
        self.column_vars: list[tuple[tuple[int, ...], mathopt.Variable]] = []
        # per-slot rows added inside capacity blocks (``refine``): row id per (r, h, slot) and (r, slot), -1 where none
        self.slot_gpu = np.full(tb.cap.shape, -1, dtype=np.int64)
        self.slot_kw = np.full(tb.kw_cap.shape, -1, dtype=np.int64)
        self._keys = np.zeros((0, 7), dtype=np.int64)  # column keys as an array (filled up lazily)
        self._ids = np.zeros(0, dtype=np.int64)  # variable id of each column of ``_keys``
        self.tracker = self.model.add_update_tracker()
        self._init = parameters_pb2.SolverInitializerProto()
        self.core = core_solver.new(mathopt.SolverType.GLOP.value, self.model.export_model(), self._init)
        self.tracker.advance_checkpoint()
        self.value_ = np.nan
        self.x = self.y = np.zeros(0)
        self.var_status: np.ndarray | None = None
        self.row_status: np.ndarray | None = None

    def _row(self, ub: float) -> mathopt.LinearConstraint:
        return self.model.add_linear_constraint(ub=ub)

    def add(self, ch: Choice, rows: np.ndarray) -> int:
        """Add the options ``ch`` of job ``rows`` as columns of their classes; returns how many were new."""
        return self.add_options(ch, np.asarray(rows), np.arange(len(ch.r)))

    def add_options(self, ch: Choice, pick: np.ndarray, job_rows: np.ndarray) -> int:
        """Add options ``ch[pick]`` (option ``k`` belongs to job row ``job_rows[k]``); returns how many were new.

        The new columns go into the model in bulk (MathOpt's elemental arrays): one call per attribute instead of
        one per coefficient (1,000 jobs at 15-minute slots: ~120,000 coefficients over the rounds to convergence,
        a fifth of the column generation's time when set one by one).
        """
        tb = self.tb
        new_k: list[int] = []
        new_keys: list[tuple[int, ...]] = []
        for k_ in pick:
            k = int(k_)
            if ch.r[k] < 0:
                continue
            key = (
                int(self.cls[int(job_rows[k])]),
                int(ch.r[k]),
                int(ch.h[k]),
                int(ch.s1[k]),
                int(ch.l1[k]),
                int(ch.s2[k]),
                int(ch.l2[k]),
            )
            if key in self.columns:
                continue
            self.columns.add(key)
            new_k.append(k)
            new_keys.append(key)
        if not new_k:
            return 0
        ks = np.array(new_k, dtype=np.int64)
        keys = np.array(new_keys, dtype=np.int64)
        n = len(ks)
        obj = option_objective(tb, Choice(*(ch_k[ks] for ch_k in (ch.r, ch.h, ch.s1, ch.l1, ch.s2, ch.l2))),
                               rows=np.asarray(job_rows)[ks])
        el = self.model._elemental  # MathOpt keeps its bulk setters on the model's elemental
        ids = np.asarray(el.add_elements(enums.ElementType.VARIABLE, n), dtype=np.int64)
        by_var = ids.reshape(-1, 1)
        el.set_attrs(enums.DoubleAttr1.VARIABLE_LOWER_BOUND, by_var, np.zeros(n))
        el.set_attrs(enums.DoubleAttr1.VARIABLE_UPPER_BOUND, by_var, self.counts[keys[:, 0]].astype(float))
        el.set_attrs(enums.DoubleAttr1.OBJECTIVE_LINEAR_COEFFICIENT, by_var, np.asarray(obj, dtype=float))
        conv = self._conv_ids[keys[:, 0]]
        el.set_attrs(enums.DoubleAttr2.LINEAR_CONSTRAINT_COEFFICIENT, np.column_stack((conv, ids)), np.ones(n))
        # slots of each column per block (the bound's two-chunk relaxation may overlap its chunks: they add up)
        col, b, count = column_blocks(keys, self.block_of)
        row = np.asarray(job_rows)[ks][col]
        r, h = keys[col, 1], keys[col, 2]
        g = tb.g[row].astype(float)
        kw = g * tb.pkw[row, h] * tb.pue[r]
        gpu_at = np.empty(len(col), dtype=np.int64)
        kw_at = np.empty(len(col), dtype=np.int64)
        for i, (ri, hi, bi) in enumerate(zip(r.tolist(), h.tolist(), b.tolist(), strict=True)):
            grow = self.gpu_rows.get((ri, hi, bi))
            if grow is None:
                grow = self.gpu_rows[(ri, hi, bi)] = self._row(float(self.cap_b[ri, hi, bi]))
            krow = self.kw_rows.get((ri, bi))
            if krow is None:
                krow = self.kw_rows[(ri, bi)] = self._row(float(self.kw_cap_b[ri, bi]))
            gpu_at[i], kw_at[i] = grow.id, krow.id
        coef_keys = np.concatenate((np.column_stack((gpu_at, ids[col])), np.column_stack((kw_at, ids[col]))))
        el.set_attrs(enums.DoubleAttr2.LINEAR_CONSTRAINT_COEFFICIENT, coef_keys, np.concatenate((g * count, kw * count)))
        self.column_vars.extend(
            (key, mathopt.Variable(el, int(i))) for key, i in zip(new_keys, ids.tolist(), strict=True)
        )
        if (self.slot_gpu >= 0).any() or (self.slot_kw >= 0).any():
            self._slot_coefficients(keys, ids)
        return n

    def _slot_coefficients(self, keys: np.ndarray, ids: np.ndarray, first_row: int = 0) -> None:
        """Coefficients of the columns ``keys`` (variable ids ``ids``) in the per-slot rows of id ``first_row`` on."""
        col, t = column_slots(keys)
        r, h = keys[col, 1], keys[col, 2]
        row = self.rep[keys[col, 0]]
        g = self.tb.g[row].astype(float)
        parts = []
        for at, coef in ((self.slot_gpu[r, h, t], g), (self.slot_kw[r, t], g * self.tb.pkw[row, h] * self.tb.pue[r])):
            on = at >= first_row
            if on.any():
                pair, inv = np.unique(np.column_stack((at[on], ids[col[on]])), axis=0, return_inverse=True)
                parts.append((pair, np.bincount(inv.ravel(), weights=coef[on], minlength=len(pair))))
        for pair, value in parts:
            self.model._elemental.set_attrs(enums.DoubleAttr2.LINEAR_CONSTRAINT_COEFFICIENT, pair, value)

    def _column_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Keys ``(n, 7)`` and variable ids of every column so far."""
        if len(self._keys) < len(self.column_vars):
            more = self.column_vars[len(self._keys) :]
            self._keys = np.concatenate((self._keys, np.array([k for k, _ in more], dtype=np.int64).reshape(-1, 7)))
            self._ids = np.concatenate((self._ids, np.array([v.id for _, v in more], dtype=np.int64)))
        return self._keys, self._ids

    def refine(self, tol: float = 1e-6) -> int:
        """Per-slot GPU and power rows where the last LP solution breaks a slot's capacity inside a block; returns
        how many rows were added.

        The block rows let the LP move capacity between the slots of an hour; a dive from such a solution fixes
        jobs slot by slot and finds the LP's columns full where the LP saw room. The rows added here are valid
        (every plan meets each slot's capacity), so the LP stays a relaxation; the block rows stay (implied by
        the slot rows of a whole block, harmless elsewhere). Only slots the solution overfills get a row, so the
        LP keeps close to the block LP's size.
        """
        keys, ids = self._column_arrays()
        x = _padded(self.x, self.model.get_next_variable_id())[ids] if len(ids) else np.zeros(0)
        pos = np.flatnonzero(x > 1e-9)
        if not len(pos):
            return 0
        tb = self.tb
        col, t = column_slots(keys[pos])
        k = keys[pos][col]
        row = self.rep[k[:, 0]]
        g = tb.g[row] * x[pos][col]
        gpu = np.zeros(tb.cap.shape)
        kw = np.zeros(tb.kw_cap.shape)
        np.add.at(gpu, (k[:, 1], k[:, 2], t), g)
        np.add.at(kw, (k[:, 1], t), g * tb.pkw[row, k[:, 2]] * tb.pue[k[:, 1]])
        new_g = np.argwhere((gpu > tb.cap + tol * np.maximum(1.0, tb.cap)) & (self.slot_gpu < 0))
        new_kw = np.argwhere((kw > tb.kw_cap + tol * np.maximum(1.0, tb.kw_cap)) & (self.slot_kw < 0))
        first_row = self.model.get_next_linear_constraint_id()
        for r_, h_, t_ in new_g.tolist():
            self.slot_gpu[r_, h_, t_] = self._row(float(tb.cap[r_, h_, t_])).id
        for r_, t_ in new_kw.tolist():
            self.slot_kw[r_, t_] = self._row(float(tb.kw_cap[r_, t_])).id
        added = len(new_g) + len(new_kw)
        if added:
            self._slot_coefficients(keys, ids, first_row)
        return added

    def solve(self, time_limit_s: float, *, bounds_changed: bool = False) -> bool:
        """Re-solve (from the last optimal basis when there is one); True when optimal.

        After new columns the primal simplex goes on from the last basis (still primal feasible); after raised
        variable bounds (``bounds_changed``, the dive of ``optimizer.dive``) that basis is only dual feasible,
        and the dual simplex goes on from it. With capacity blocks (15-minute slots, hourly prices held) the dual
        simplex goes on from the last basis after new columns too: 1,000 bench jobs, seed 0, 15 rounds to
        convergence, GLOP 9.3 and 11.7 s against 14.3 and 16.7 s by the primal (development machine, load ~12;
        at 60-minute slots 13.9 against 15.1 s, within noise, so left as it was there).

        Works on MathOpt's protos (the parsed Python result maps every variable and costs more than the
        simplex iterations of a round).
        """
        update = self.tracker.export_update()
        if update is not None:
            if not self.core.update(update):
                self.core = core_solver.new(
                    mathopt.SolverType.GLOP.value, self.model.export_model(), self._init
                )
            self.tracker.advance_checkpoint()
        n_var = self.model.get_next_variable_id()
        # a round that adds many columns (early rounds at 10,000 jobs: +16,000) goes faster by the dual simplex
        # from scratch than by the primal one from the last basis (21 s against 7 s there)
        warm = (
            self.var_status is not None
            and self.row_status is not None
            and n_var - len(self.var_status) <= 0.5 * len(self.var_status)
        )
        params = mathopt.SolveParameters(
            time_limit=timedelta(seconds=max(0.05, time_limit_s)),
            presolve=mathopt.Emphasis.OFF,
            lp_algorithm=mathopt.LPAlgorithm.PRIMAL_SIMPLEX
            if warm and not bounds_changed and self.tb.blocks is None
            else mathopt.LPAlgorithm.DUAL_SIMPLEX,
        ).to_proto()
        model_params = model_parameters_pb2.ModelSolveParametersProto()
        model_params.reduced_costs_filter.filter_by_ids = True  # not read: keep them out of the result
        if warm and self.var_status is not None and self.row_status is not None:
            # columns added since the last solve start at their lower bound 0, slacks of new rows basic
            n_row = self.model.get_next_linear_constraint_id()
            var_status = np.full(n_var, solution_pb2.BASIS_STATUS_AT_LOWER_BOUND, dtype=np.int64)
            row_status = np.full(n_row, solution_pb2.BASIS_STATUS_BASIC, dtype=np.int64)
            var_status[: len(self.var_status)] = self.var_status
            row_status[: len(self.row_status)] = self.row_status
            basis = model_params.initial_basis
            basis.variable_status.ids.extend(range(n_var))
            basis.variable_status.values.extend(var_status.tolist())
            basis.constraint_status.ids.extend(range(n_row))
            basis.constraint_status.values.extend(row_status.tolist())
        out = self.core.solve(
            params, model_params, None, callback_pb2.CallbackRegistrationProto(), None, None
        )
        if out.termination.reason != result_pb2.TERMINATION_REASON_OPTIMAL or not out.solutions:
            return False
        sol = out.solutions[0]
        self.value_ = float(sol.primal_solution.objective_value)
        self.x = _dense(sol.primal_solution.variable_values, self.model.get_next_variable_id())
        self.y = _dense(sol.dual_solution.dual_values, self.model.get_next_linear_constraint_id())
        self.var_status = np.array(sol.basis.variable_status.values, dtype=np.int64)
        self.row_status = np.array(sol.basis.constraint_status.values, dtype=np.int64)
        if len(self.var_status) != self.model.get_next_variable_id():
            self.var_status = self.row_status = None  # no complete basis: the next solve starts cold
        return True

    def value(self) -> float:
        return self.value_

    def price_in(self, found: list, pi: np.ndarray, is_rep: np.ndarray, per_class: int) -> int:
        """Add the options of ``found`` (``bound.evaluate``'s collection at this master's duals) that price in.

        An option prices in when its priced value is below its class's convexity dual ``pi``; up to
        ``per_class`` (region, hardware) pairs per class, cheapest first. Returns how many columns were new.
        """
        rows, r, h, s1, l1, s2, l2, val = (np.concatenate(x) for x in zip(*found, strict=True))
        c = self.cls[rows]
        keep = is_rep[rows] & np.isfinite(val) & (val < pi[c] - 1e-9 * np.maximum(1.0, np.abs(pi[c])))
        idx = np.flatnonzero(keep)
        idx = idx[np.lexsort((val[idx], c[idx]))]
        rank = np.arange(len(idx)) - np.searchsorted(c[idx], c[idx], side="left")
        idx = idx[rank < per_class]
        if len(idx) == 0:
            return 0
        return self.add_options(Choice(r, h, s1, l1, s2, l2), idx, rows)

    def primal(self) -> np.ndarray:
        """Columns with a positive LP value: rows ``(class, r, h, s1, l1, s2, l2)`` and their values."""
        at = np.array([var.id for _, var in self.column_vars], dtype=np.int64)
        x = _padded(self.x, self.model.get_next_variable_id())[at] if len(at) else np.zeros(0)
        pos = np.flatnonzero(x > 1e-7)
        table = np.array([self.column_vars[k][0] for k in pos], dtype=np.int64).reshape(-1, 7)
        return np.column_stack((table.astype(float), x[pos]))

    def duals(self) -> tuple[Multipliers, np.ndarray]:
        """Capacity prices per slot (a block's dual on each of its slots) and the convexity duals."""
        tb = self.tb
        nb = len(self.starts)
        # rows added since the last solve that succeeded (a dive's failed re-solve) have no dual yet: price them 0
        y = _padded(self.y, self.model.get_next_linear_constraint_id())
        lam, mu = np.zeros((tb.R, tb.H, nb)), np.zeros((tb.R, nb))
        for rows, target in ((self.gpu_rows, lam), (self.kw_rows, mu)):
            if rows:
                keys = np.array(list(rows.keys()), dtype=np.int64)
                at = np.array([row.id for row in rows.values()], dtype=np.int64)
                target[tuple(keys.T)] = np.maximum(0.0, -y[at])
        m = Multipliers(spread(lam, self.starts, tb.T), spread(mu, self.starts, tb.T))
        # a slot's own row (``refine``) prices it on top of its block's
        for ids, target in ((self.slot_gpu, m.lam), (self.slot_kw, m.mu)):
            on = ids >= 0
            if on.any():
                target[on] += np.maximum(0.0, -y[ids[on]])
        pi = y[np.array([row.id for row in self.conv], dtype=np.int64)]
        return m, pi


def _padded(values: np.ndarray, n: int) -> np.ndarray:
    """``values`` extended with zeros to length ``n`` (entries for variables or rows added since it was read)."""
    return values if len(values) >= n else np.concatenate((values, np.zeros(n - len(values))))


def _dense(vector, n: int) -> np.ndarray:
    """A MathOpt sparse double vector as a dense array of length ``n`` (ids are variable or row ids)."""
    out = np.zeros(n)
    ids = np.array(vector.ids, dtype=np.int64)
    if len(ids):
        out[ids] = np.array(vector.values, dtype=float)
    return out


def _price_splits(
    tb: Tables, m: Multipliers, rows: np.ndarray, best_v: np.ndarray, counts: np.ndarray, found: list
) -> float:
    """Price the two-chunk runs of ``rows`` (class representatives) over every split at ``m``, add them to
    ``found`` (``bound.evaluate``'s collection) and return how much they lower the Lagrangian value (each job of a
    class gains what its representative gains)."""
    got = chunk_options(tb, rows, m.lam, m.mu, m.nu, above=best_v, eligible=True)
    found.append(got)
    gain = best_v[rows] - np.minimum(best_v[rows], got[-1])
    return float((gain * counts).sum())


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
    keep_master: bool = False,
    columns: tuple[Choice, np.ndarray] | None = None,
    start: tuple[float, Multipliers] | None = None,
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
    keep_master : bool
        Return the restricted master LP itself as ``info["master"]`` (the dive of ``optimizer.dive`` goes on from
        its last basis).
    columns : tuple of (Choice, numpy.ndarray) or None
        More first columns: options and the job row of each (``optimizer.coarse_lp``: the hourly LP's).
    start : tuple of (float, Multipliers) or None
        A valid bound known before the first round and its prices (kept unless a round does better).

    Returns
    -------
    tuple
        ``(best valid bound [objective units], multipliers of that bound, info)``; ``info["primal"]`` holds
        the last restricted LP solution (see ``RestrictedMaster.primal``), ``info["columns_table"]`` every column.
    """
    t0 = time.perf_counter()
    master = RestrictedMaster(tb, cls, rep, counts)
    is_rep = np.zeros(tb.J, dtype=bool)
    is_rep[rep] = True
    # classes of interruptible jobs of at most two chunks: their columns are priced over every split
    split_rows = rep[tb.intr[rep] & (tb.max_chunks[rep] <= 2)]
    for seed in seeds:
        master.add(seed, np.arange(tb.J))
    if columns is not None:
        master.add_options(columns[0], np.arange(len(columns[1])), columns[1])
    best, best_m = (-np.inf, Multipliers.zeros(tb)) if start is None else start
    info: dict[str, Any] = {"rounds": 0, "columns": 0, "lp_value": None, "converged": False, "primal": None}
    trace: list[tuple[float, float]] = []
    info["trace"] = trace
    recent: list[Multipliers] = []  # duals of every round (the primal heuristics price with the last few)
    info["recent_duals"] = recent
    for _ in range(max_rounds):
        remaining = time_limit_s - (time.perf_counter() - t0)
        if remaining <= 0:
            break
        if not master.solve(remaining):
            break
        lp_value = master.value()
        info["lp_value"] = lp_value
        info["primal"] = master.primal()
        m, pi = master.duals()
        found: list = []
        value, _, best_v = evaluate(tb, m, collect=found)
        if len(split_rows):
            value -= _price_splits(tb, m, split_rows, best_v, counts[cls[split_rows]], found)
        info["rounds"] = int(info["rounds"] or 0) + 1
        trace.append((round(lp_value, 4), round(value, 4)))
        if value > best:
            best, best_m = value, m
        recent.append(m)
        if lp_value - best <= rel_tol * max(1.0, abs(lp_value)):
            info["converged"] = True
            break
        if master.price_in(found, pi, is_rep, per_class) == 0:
            info["converged"] = True
            break
    info["columns"] = len(master.columns)
    info["columns_table"] = np.array(sorted(master.columns), dtype=np.int64).reshape(-1, 7)
    if keep_master:
        info["master"] = master
    return float(best), best_m, info
