"""CP-SAT model over aggregated job classes and pruned options, built by small ``build_*``/``add_*`` steps.

Identical jobs (same GPUs, window, durations, power, eligibility, chunking, priority) form one class with an
integer count per option, so symmetric jobs cost one variable per option instead of one per job. Options
come from Lagrangian reduced-cost fixing: an option whose priced value exceeds its job's best by more than
``upper - lower`` cannot appear in any plan better than ``upper``, so dropping it is exact; when the kept
set is still too large it is cut to the best options per class and the pruning is reported as inexact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from optimizer.bound import Choice, Multipliers, cumulative, segment_values
from optimizer.heuristic import option_objective
from optimizer.problem import ObjectiveKind, SolveParams
from optimizer.tables import Tables, power_mw


@dataclass(slots=True)
class Options:
    """Candidate options per class (arrays aligned by option)."""

    cls: np.ndarray
    ch: Choice  # rows of ``ch`` are options here, not jobs
    obj: np.ndarray  # objective [objective units]
    cost: np.ndarray  # energy cost [currency]
    exact: bool  # True when nothing but provably useless options was dropped


@dataclass(slots=True)
class Model:
    """A built CP-SAT model and what is needed to read a solution back."""

    model: cp_model.CpModel
    x: list  # one variable per option
    u: list  # one "left out" count per class
    scale: float


def build_classes(tb: Tables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group identical jobs: ``(class of each row, representative row per class, count per class)``."""
    if tb.J == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    key = np.column_stack(
        [
            tb.g,
            tb.rel,
            tb.dl,
            tb.prio,
            tb.intr,
            tb.min_chunk,
            tb.ovh,
            tb.dur,
            tb.pkw,
            tb.elig.reshape(tb.J, -1),
        ]
    ).astype(float)
    _, rep, cls, counts = np.unique(key, axis=0, return_index=True, return_inverse=True, return_counts=True)
    return cls.ravel(), rep, counts


def build_options(
    tb: Tables,
    cls: np.ndarray,
    rep: np.ndarray,
    m: Multipliers,
    best_priced: np.ndarray,
    threshold: float,
    seeds: list[Choice],
    max_options: int,
) -> Options:
    """Options of every class: reduced-cost survivors of the representative plus every seed plan's choices."""
    is_rep = np.zeros(tb.J, dtype=bool)
    is_rep[rep] = True
    w = tb.weights(m.nu)
    cum_a, cum_l = cumulative(tb.slot_h * w + m.mu), cumulative(m.lam)
    parts: list[tuple[np.ndarray, ...]] = []
    for seg in tb.contig:
        si, start, _, value = segment_values(tb, seg, cum_a, cum_l)
        rows = seg.job[si]
        keep = is_rep[rows] & np.isfinite(value) & (value - best_priced[rows] <= threshold)
        rows, start, delta = rows[keep], start[keep], (value - best_priced[rows])[keep]
        ln = seg.length[si][keep]
        parts.append((cls[rows], np.full(len(rows), seg.r), np.full(len(rows), seg.h), start, ln, delta))
    cat = (
        [np.concatenate(p) if p else np.zeros(0) for p in zip(*parts, strict=True)]
        if parts
        else [np.zeros(0)] * 6
    )
    c, r, h, s1, l1, delta = (a.astype(np.int64) if i < 5 else a for i, a in enumerate(cat))
    exact = not len(tb.halves)
    per_class = max(4, min(48, max_options // (5 * max(1, len(rep)))))
    if len(c) > max_options or np.bincount(c, minlength=len(rep)).max(initial=0) > per_class:
        exact = False
        order = np.lexsort((delta, c))
        c, r, h, s1, l1 = c[order], r[order], h[order], s1[order], l1[order]
        first = np.searchsorted(c, c, side="left")
        rank = np.arange(len(c)) - first
        keep = rank < per_class
        c, r, h, s1, l1 = c[keep], r[keep], h[keep], s1[keep], l1[keep]
    z = np.zeros_like(c)
    return options_of(tb, cls, rep, np.column_stack((c, r, h, s1, l1, z, z)), seeds, exact)


def options_of(
    tb: Tables, cls: np.ndarray, rep: np.ndarray, table: np.ndarray, seeds: list[Choice], exact: bool
) -> Options:
    """Options of the rows ``(class, r, h, s1, l1, s2, l2)`` of ``table`` plus every seed plan's choices."""
    parts = [np.asarray(table, dtype=np.int64).reshape(-1, 7)]
    for seed in seeds:
        on = np.flatnonzero(seed.r >= 0)
        parts.append(np.column_stack((cls[on], seed.r[on], seed.h[on], seed.s1[on], seed.l1[on], seed.s2[on],
                                      seed.l2[on])).astype(np.int64))
    table = np.unique(np.concatenate(parts), axis=0)
    c, r, h, s1, l1, s2, l2 = (table[:, k] for k in range(7))
    ch = Choice(r, h, s1, l1, s2, l2)
    # objective of an option = objective of the class representative running it
    obj = option_objective(tb, ch, 0.0, rows=rep[c])  # carbon_cost_cap: carbon only, the cap is a constraint
    cost = option_objective(tb, ch, rows=rep[c], weights=tb.known_price())
    return Options(c, ch, obj, cost, exact)


def add_assignment(model: cp_model.CpModel, opts: Options, counts: np.ndarray) -> tuple[list, list]:
    """One count per option; each class's options plus its left-out count add up to its size."""
    x = []
    for k in range(len(opts.cls)):
        c = int(opts.cls[k])
        n = int(counts[c])
        name = f"x[c={c},r={opts.ch.r[k]},h={opts.ch.h[k]},s={opts.ch.s1[k]}]"
        x.append(model.new_bool_var(name) if n == 1 else model.new_int_var(0, n, name))
    u = [model.new_int_var(0, int(n), f"left_out[c={c}]") for c, n in enumerate(counts)]
    by_class: list[list[int]] = [[] for _ in counts]
    for k, c in enumerate(opts.cls):
        by_class[int(c)].append(k)
    # every job of a class is planned once or left out
    for c, ks in enumerate(by_class):
        model.add(cp_model.LinearExpr.sum([x[k] for k in ks]) + u[c] == int(counts[c]))
    return x, u


def _slot_terms(tb: Tables, opts: Options, with_h: bool):
    """Option index and slot of every running slot, grouped by (region[, hardware], slot)."""
    ch = opts.ch
    ks, ts = [], []
    for s, ln in ((ch.s1, ch.l1), (ch.s2, ch.l2)):
        k = np.repeat(np.arange(len(s)), ln)
        offsets = np.concatenate(([0], np.cumsum(ln)))
        ks.append(k)
        ts.append(s[k] + np.arange(len(k)) - offsets[k])
    k, t = np.concatenate(ks), np.concatenate(ts)
    key = (ch.r[k] * tb.H + ch.h[k]) * tb.T + t if with_h else ch.r[k] * tb.T + t
    order = np.argsort(key, kind="stable")
    k, key = k[order], key[order]
    bounds = np.flatnonzero(np.diff(key)) + 1
    return np.split(k, bounds), key[np.concatenate(([0], bounds))] if len(key) else np.zeros(
        0, dtype=np.int64
    )


def add_gpu_capacity(model, tb: Tables, opts: Options, x: list, counts: np.ndarray, rep: np.ndarray) -> int:
    """GPUs in use per (region, hardware, slot) stay within the inventory; returns constraints added."""
    groups, keys = _slot_terms(tb, opts, with_h=True)
    g = tb.g[rep[opts.cls]]
    most = g * counts[opts.cls]
    added = 0
    for ks, key in zip(groups, keys, strict=True):
        rh, t = divmod(int(key), tb.T)
        r, h = divmod(rh, tb.H)
        cap = int(tb.cap[r, h, t])
        if most[ks].sum() <= cap:
            continue  # cannot bind
        model.add(cp_model.LinearExpr.weighted_sum([x[k] for k in ks], g[ks].tolist()) <= cap)
        added += 1
    return added


def add_power_budget(model, tb: Tables, opts: Options, x: list, counts: np.ndarray, rep: np.ndarray) -> int:
    """Facility power of running jobs per (region, slot) stays within budget minus base load [mW, rounded up]."""
    groups, keys = _slot_terms(tb, opts, with_h=False)
    rows = rep[opts.cls]
    watts = power_mw(tb.g[rows] * tb.pkw[rows, opts.ch.h] * tb.pue[opts.ch.r])
    caps = tb.kw_cap_mw()
    most = watts * counts[opts.cls]
    added = 0
    for ks, key in zip(groups, keys, strict=True):
        r, t = divmod(int(key), tb.T)
        limit = int(caps[r, t])
        if most[ks].sum() <= limit:
            continue
        model.add(cp_model.LinearExpr.weighted_sum([x[k] for k in ks], watts[ks].tolist()) <= limit)
        added += 1
    return added


def add_cost_cap(model, tb: Tables, opts: Options, x: list, scale: float) -> None:
    """Total energy cost stays within the objective's cost cap (coefficients rounded up)."""
    cap = tb.problem.objective.cost_cap
    if tb.problem.objective.kind is not ObjectiveKind.CARBON_WITH_COST_CAP or cap is None:
        return
    coeffs = np.ceil(opts.cost * scale).astype(np.int64)
    model.add(cp_model.LinearExpr.weighted_sum(x, coeffs.tolist()) <= math.floor(cap * scale))


def add_objective(model, tb: Tables, opts: Options, x: list, u: list, rep: np.ndarray, scale: float) -> None:
    """Minimise the objective of planned jobs plus the penalty of jobs left out."""
    coeffs = np.rint(opts.obj * scale).astype(np.int64)
    pen = np.rint(tb.penalty[rep] * scale).astype(np.int64)
    model.minimize(
        cp_model.LinearExpr.weighted_sum(x, [int(v) for v in coeffs])
        + cp_model.LinearExpr.weighted_sum(u, [int(v) for v in pen])
    )


def add_hint(
    model, opts: Options, x: list, u: list, cls: np.ndarray, counts: np.ndarray, hint: Choice
) -> None:
    """Warm start from a plan of job rows."""
    index = {
        (int(c), int(r), int(h), int(s1), int(l1), int(s2), int(l2)): k
        for k, (c, r, h, s1, l1, s2, l2) in enumerate(
            zip(opts.cls, opts.ch.r, opts.ch.h, opts.ch.s1, opts.ch.l1, opts.ch.s2, opts.ch.l2, strict=True)
        )
    }
    value = np.zeros(len(x), dtype=np.int64)
    left = counts.copy()
    for row in np.flatnonzero(hint.r >= 0):
        key = (
            int(cls[row]),
            int(hint.r[row]),
            int(hint.h[row]),
            int(hint.s1[row]),
            int(hint.l1[row]),
            int(hint.s2[row]),
            int(hint.l2[row]),
        )
        k = index.get(key)
        if k is not None:
            value[k] += 1
            left[cls[row]] -= 1
    for k, v in enumerate(x):
        model.add_hint(v, int(value[k]))
    for c, v in enumerate(u):
        model.add_hint(v, int(left[c]))


def build_model(
    tb, opts, cls, rep, counts, hint: Choice | None, scale: float
) -> tuple[Model, dict[str, int]]:
    """Create the CP-SAT model; returns it with constraint counts per block."""
    model = cp_model.CpModel()
    x, u = add_assignment(model, opts, counts)
    n_gpu = add_gpu_capacity(model, tb, opts, x, counts, rep)
    n_kw = add_power_budget(model, tb, opts, x, counts, rep)
    add_cost_cap(model, tb, opts, x, scale)
    add_objective(model, tb, opts, x, u, rep, scale)
    if hint is not None:
        add_hint(model, opts, x, u, cls, counts, hint)
    return Model(model, x, u, scale), {"gpu_rows": n_gpu, "power_rows": n_kw}


def solve_model(built: Model, params: SolveParams, time_limit_s: float):
    """Run CP-SAT with explicit time limit, workers and seed; returns ``(solver, status)``."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.1, time_limit_s)
    solver.parameters.num_workers = params.num_workers
    solver.parameters.random_seed = params.random_seed
    solver.parameters.log_search_progress = params.log_search
    # presolve of these big linear models is slow and gains little: keep it light so search starts at once
    solver.parameters.max_presolve_iterations = 1
    solver.parameters.cp_model_probing_level = 0
    solver.parameters.symmetry_level = 0
    status = solver.solve(built.model)
    return solver, status


def read_solution(solver, built: Model, opts: Options, cls: np.ndarray, J: int) -> Choice:
    """Give each job row of a class one of the options its class got."""
    ch = Choice.empty(J)
    rows_of: dict[int, list[int]] = {}
    for row, c in enumerate(cls):
        rows_of.setdefault(int(c), []).append(row)
    for k, var in enumerate(built.x):
        n = int(solver.value(var))
        if n <= 0:
            continue
        rows = rows_of[int(opts.cls[k])]
        for _ in range(n):
            row = rows.pop()
            for f in ("r", "h", "s1", "l1", "s2", "l2"):
                getattr(ch, f)[row] = getattr(opts.ch, f)[k]
    return ch
