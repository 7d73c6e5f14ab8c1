"""A plan by diving on the column-generation LP: fix a few jobs at a time, re-solve, price, repeat.

Rounding the converged LP in one pass settles where its vertex leads: at 1,000 jobs the fractional remainder of
the biggest jobs no longer fits once the integral part is placed, and local search from there stalls 1-3 % above
the LP bound (a long run needs GPUs free in dozens of consecutive slots that several jobs hold). Here the LP
stays in the loop (a diving heuristic of branch-and-price; see Sadykov, Vanderbeck, Pessoa, Tahiri and Uchoa,
"Primal heuristics for branch and price: the assets of diving methods", INFORMS J. Computing 31, 2019). Each
step

1. takes, biggest jobs first (GPU-slots times the LP's share), up to ``batch`` columns whose LP value exceeds the
   jobs already fixed on them by at least ``min_share``, and fixes one more job on each (a lower bound on the
   column) if it fits the capacity the fixed jobs leave;
2. a column that no longer fits gets its upper bound at the jobs already fixed on it, and the job's best option
   that still fits (at the current duals) joins the LP as a column, so the LP keeps a way to place the class
   (pricing alone would offer the forbidden column again: it is still the cheapest at those duals);
3. prices new columns at the current duals (every ``price_every`` steps) and re-solves, by the dual simplex from
   the last basis (raised bounds keep it dual feasible).

Only the jobs fixed are a plan: fixed jobs never exceed any capacity. When no column can take one more job, a step
fixes fewer than ``TAIL_SHARE`` of its batch (the tail), or the time is up, the rest is placed by the LP's
remaining mass where it fits, else by the best feasible option at the LP's duals. The dive's LP value is not a bound (the fixings restrict it).

Which step size ends lowest varies from problem to problem, so ``dive_portfolio`` runs several dives from the same
LP, each in a forked child, two at a time, and the planner takes every plan as a start.
"""

from __future__ import annotations

import time

import numpy as np

from optimizer.bound import Choice, Option, evaluate
from optimizer.candidates import fits_option
from optimizer.heuristic import Residual, Scanner, size_order
from optimizer.lp import RestrictedMaster
from optimizer.parallel import Child, fork_call
from optimizer.rounding import runnable_columns
from optimizer.tables import Tables


def lp_dive(
    tb: Tables,
    master: RestrictedMaster,
    rep: np.ndarray,
    counts: np.ndarray,
    *,
    time_limit_s: float,
    batch: int | None = None,
    min_share: float = 0.01,
    per_class: int = 4,
    price_every: int = 1,
) -> Choice:
    """A plan from diving on ``master``, the converged restricted LP of ``column_generation(keep_master=True)``.

    Parameters
    ----------
    tb : Tables
        Problem arrays.
    master : RestrictedMaster
        The restricted master LP, solved; its bounds and columns change (do not use it afterwards).
    rep, counts : numpy.ndarray
        A representative job row and the size of each class.
    time_limit_s : float
        Wall-clock limit [s]; the plan is completed greedily when it runs out.
    batch : int or None
        Jobs fixed per step (default: 2.5 % of the jobs, at least 1). Fewer per step cost more steps and end lower
        on the whole (1,000 jobs, seeds 0/1/2: 25 a step 783.7/649.7/830.2 in 2.6-3.1 s, 50 a step
        785.1/649.1/831.4 in 2.0-2.5 s, 100 a step 787.1/653.9 in 1.5-1.9 s).
    min_share : float
        Least LP value above the jobs already fixed for a column to take one more (0.35 or more stops the dive
        while small shares are left, and the greedy completion of many big jobs costs 5-10 %).
    per_class : int
        Most columns priced in per class and step.
    price_every : int
        Steps between pricing rounds (a round costs about as much as a re-solve at 1,000 jobs; without pricing
        the dives end 0.5-1 % higher).

    Returns
    -------
    Choice
        A plan that fits every capacity; a job that fits nowhere is left out (``r == -1``).
    """
    t0 = time.perf_counter()
    batch = batch or max(1, int(0.025 * tb.J))
    is_rep = np.zeros(tb.J, dtype=bool)
    is_rep[rep] = True
    res = Residual(tb)  # capacity the fixed jobs leave
    one = Choice.empty(tb.J)  # scratch: the option of a class's representative row
    fixed = np.zeros(len(counts), dtype=np.int64)  # jobs fixed per class
    lower: dict[int, int] = {}  # jobs fixed per column (index into master.column_vars)
    usable = np.zeros(0, dtype=bool)  # per column: runnable (not one of the bound's overlapping relaxations)

    def left() -> float:
        return time_limit_s - (time.perf_counter() - t0)

    steps = 0
    while left() > 0:
        n_col = len(master.column_vars)
        if len(usable) < n_col:
            keys = np.array([key for key, _ in master.column_vars[len(usable) :]], dtype=np.int64).reshape(-1, 7)
            usable = np.concatenate((usable, runnable_columns(keys)))
        x = _values(master)
        cur = np.zeros(n_col)
        if lower:
            at = np.fromiter(lower.keys(), dtype=np.int64)
            cur[at] = np.fromiter(lower.values(), dtype=float)
        cand = np.flatnonzero(x - cur >= min_share)
        if not len(cand):
            break  # nothing left to fix: the LP is integral on every column
        keys = np.array([master.column_vars[k][0] for k in cand], dtype=np.int64)
        size = tb.g[rep[keys[:, 0]]] * (keys[:, 4] + keys[:, 6])
        m, pi = master.duals()
        scan = Scanner(tb, m)
        taken = capped = 0
        alternatives: list[tuple[int, Option]] = []
        for i in np.argsort(-size * np.minimum(1.0, x[cand] - cur[cand]), kind="stable"):
            k = int(cand[i])
            key, var = master.column_vars[k]
            c, opt = key[0], _option(key)
            if fixed[c] >= counts[c]:
                continue
            row = int(rep[c])
            if not usable[k] or not fits_option(tb, res, row, opt):
                var.upper_bound = float(cur[k])
                capped += 1
                found = scan.best(row, res)
                if found is not None:
                    alternatives.append((row, found[2]))
                continue
            one.set(row, opt)
            res.apply(tb, one, row, -1)
            fixed[c] += 1
            lower[k] = int(cur[k]) + 1
            var.lower_bound = float(lower[k])
            taken += 1
            if taken >= batch:
                break
        if not taken and not capped:
            break
        if steps and taken < int(TAIL_SHARE * batch):
            break  # the tail: most columns left no longer fit, and the completion places the rest as well
        if alternatives:
            alt = Choice.empty(len(alternatives))
            for i, (_, opt) in enumerate(alternatives):
                alt.set(i, opt)
            master.add_options(alt, np.arange(len(alternatives)), np.array([row for row, _ in alternatives]))
        steps += 1
        if steps % price_every == 0:
            found_m: list = []
            evaluate(tb, m, collect=found_m)
            master.price_in(found_m, pi, is_rep, per_class)
        if left() <= 0 or not master.solve(left(), bounds_changed=True):
            break
    return _complete(tb, master, rep, lower)


# (share of the jobs fixed per step, steps between pricing rounds) of the dives, in two lanes run side by side: which
# one ends lowest varies from problem to problem (1,000 jobs, one dive each from the converged LP, seeds 0/1/3/4:
# 2.5 % a step 783.7/649.7/816.2/777.7, 1 % 785.7/649.6/806.7/777.6, 0.5 % 785.1/648.7/802.8/776.5 in about
# 2, 3 and 5 s); the second dive of a lane starts only if it is predicted to end in time
DIVE_LANES: tuple[tuple[tuple[float, int], ...], ...] = (((0.025, 1), (0.01, 3)), ((0.005, 3),))
# time kept for a dive's greedy completion after its steps [s] (0.14 s at 1,000 jobs with nothing fixed)
COMPLETION_S = 0.25
# a dive with 1 % a step takes about 1.7 times one with 2.5 % (the 0.5 % dive's lane has it alone)
NEXT_DIVE_RATIO = 1.7


# a step that fixes fewer than this share of its batch ends the dive (for a batch of 4 jobs or more): the columns
# left mostly no longer fit, and the greedy completion places the last jobs as well as the tail of steps would,
# each of which caps dozens of columns and re-solves for a handful of jobs (1,000 jobs at 15-minute slots, untimed
# from one converged LP, seeds 0/1/2 pricing every third step: 747.54/627.46/785.06 -> 747.58/627.45/785.10 EUR in
# 10-33 % less CPU; seeds 0/1/3 pricing every step: 746.60/628.88/777.84 -> 746.69/628.92/777.91 in 20-30 % less)
TAIL_SHARE = 0.25


# share of the dives' time the per-slot rows may take before the dives start (``refine_slots``; 1,000 jobs at
# 15-minute slots, seeds 0-4: 5-7 re-solves adding 430-540 rows to the ~900 block rows, 0.7-2.0 s on a shared
# 2-core machine; without capacity blocks, at 60 minutes, there is nothing to refine and it is skipped)
REFINE_SHARE = 0.5


def refine_slots(master: RestrictedMaster, *, time_limit_s: float) -> int:
    """Per-slot capacity rows where the LP solution overfills a slot of a capacity block, re-solved until none is
    overfilled or ``time_limit_s`` [s] is up; returns how many rows were added.

    Over hour blocks the LP spreads an hour's GPUs and power freely over its quarter-hours, so a dive from it fixes
    jobs on columns that no longer fit slot by slot and ends far above the LP (1,000 jobs at 15-minute slots, seed
    3, untimed: 776.0 EUR against 763.8 from the refined LP, whose value rises only from 756.22 to 757.69).
    """
    t0 = time.perf_counter()
    added = 0
    while (left := time_limit_s - (time.perf_counter() - t0)) > 0:
        n = master.refine()
        if not n:
            break
        added += n
        if not master.solve(left, bounds_changed=True):
            break
    return added


def dive_portfolio(
    tb: Tables, master: RestrictedMaster, rep: np.ndarray, counts: np.ndarray, *, time_limit_s: float, workers: int
) -> list[Choice]:
    """The plans of the dives of ``DIVE_LANES``, each from ``master`` as it is now, within ``time_limit_s`` [s].

    Every dive runs in a forked child (each changes its copy of the LP; ``master`` stays as it is), two at a time
    with two workers (the lanes side by side). With one worker, or where fork is unavailable, one dive of the first
    lane runs here, on ``master`` itself. Where the LP prices capacity over blocks (``Tables.blocks``), ``master`` gets
    per-slot rows where its solution overfills a slot (``refine_slots``) once the other lanes have started, and the
    first lane dives from that.
    """
    t0 = time.perf_counter()

    def left() -> float:
        return time_limit_s - (time.perf_counter() - t0)

    def dive(share: float, price_every: int, budget_s: float) -> Choice:
        batch = max(1, int(share * tb.J))
        return lp_dive(tb, master, rep, counts, time_limit_s=budget_s, batch=batch, price_every=price_every)

    def start(share: float, price_every: int) -> Child | None:
        budget = max(0.0, left() - COMPLETION_S)  # the greedy completion must arrive before the parent stops waiting
        # the parent only waits for the dives (or refines the LP for the first lane, briefly): at its priority, or a
        # busy machine starves them and the plan falls back to the greedy start (1,000 jobs over one day at
        # 15-minute slots, both cores busy with another process, seed 5: no dive ended in time)
        return fork_call(lambda: dive(share, price_every, budget), yield_to_parent=False)

    if workers < 2:
        if tb.blocks is not None:
            refine_slots(master, time_limit_s=REFINE_SHARE * time_limit_s)
        return [dive(*DIVE_LANES[0][0], max(0.0, left()))]
    # the other lanes dive from the LP as column generation left it, the first lane from the LP refined per slot
    # (``refine_slots``) where capacity is priced over blocks: either may end lowest (1,000 jobs over one day at
    # 15-minute slots, seed 5: the refined dives leave jobs out, 5.4 % from the bound with both lanes refined against
    # 3.1 % with one of each)
    others = [start(*lane[0]) for lane in DIVE_LANES[1:]]
    if tb.blocks is not None:
        refine_slots(master, time_limit_s=REFINE_SHARE * time_limit_s)
    plans: list[Choice] = []
    for k, (share, every) in enumerate(DIVE_LANES[0]):
        began = time.perf_counter()
        child = start(share, every)
        if child is None:
            break
        got = child.result(timeout_s=left() + 0.5)
        if got is not None:
            plans.append(got)
        took = time.perf_counter() - began
        if k + 1 < len(DIVE_LANES[0]) and left() < NEXT_DIVE_RATIO * took:
            break
    for child in others:
        got = child.result(timeout_s=left() + 0.5) if child is not None else None
        if got is not None:
            plans.append(got)
    if not plans:  # no fork here: one dive in this process
        plans.append(dive(*DIVE_LANES[0][0], max(0.0, left())))
    return plans


def _option(key: tuple[int, ...]) -> Option:
    """The option ``(r, h, s1, l1, s2, l2)`` of a column key ``(class, r, h, s1, l1, s2, l2)``."""
    _, r, h, s1, l1, s2, l2 = key
    return Option(r, h, s1, l1, s2, l2)


def _values(master: RestrictedMaster) -> np.ndarray:
    """The last LP solution per column (0 for columns added since)."""
    ids = np.array([var.id for _, var in master.column_vars], dtype=np.int64)
    x = np.zeros(len(ids))
    seen = ids < len(master.x)
    x[seen] = master.x[ids[seen]]
    return x


def _complete(tb: Tables, master: RestrictedMaster, rep: np.ndarray, lower: dict[int, int]) -> Choice:
    """The fixed jobs, then every other job on its class's column with the most LP value left where it fits, else
    on its best feasible option at the LP's duals (biggest jobs first)."""
    cls = master.cls
    ch = Choice.empty(tb.J)
    res = Residual(tb)
    order = np.argsort(cls, kind="stable")
    starts = np.searchsorted(cls[order], np.arange(len(rep) + 1))
    used = np.zeros(len(rep), dtype=np.int64)
    for k, n in lower.items():
        key = master.column_vars[k][0]
        c = key[0]
        for _ in range(n):
            row = int(order[starts[c] + used[c]])
            used[c] += 1
            ch.set(row, _option(key))
            res.apply(tb, ch, row, -1)
    x = _values(master)
    keys = np.array([key for key, _ in master.column_vars], dtype=np.int64).reshape(-1, 7)
    runnable = runnable_columns(keys)
    rest: dict[int, list[tuple[float, Option]]] = {}
    for k, (key, _) in enumerate(master.column_vars):
        share = x[k] - lower.get(k, 0)
        if share > 1e-6 and runnable[k]:
            rest.setdefault(key[0], []).append((share, _option(key)))
    for options in rest.values():
        options.sort(key=lambda o: -o[0])
    m, _ = master.duals()
    scan = Scanner(tb, m)
    for row_ in size_order(tb):
        row = int(row_)
        if ch.r[row] >= 0:
            continue
        opt = next((o for _, o in rest.get(int(cls[row]), []) if fits_option(tb, res, row, o)), None)
        if opt is None:
            found = scan.best(row, res)
            if found is None:
                continue
            opt = found[2]
        ch.set(row, opt)
        res.apply(tb, ch, row, -1)
    return ch
