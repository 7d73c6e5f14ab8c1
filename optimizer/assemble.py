"""Turn per-row choices into a Plan: exact per-slot energy, cost and carbon; every job accounted for."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from optimizer.bound import Choice, Option, cumulative
from optimizer.check import objective_value
from optimizer.plan import (
    Assignment,
    Chunk,
    Plan,
    PlanStatus,
    SolveStats,
    Unplanned,
    UnplannedReason,
    gap_pct,
)
from optimizer.tables import Tables


def assemble_plan(
    tb: Tables,
    ch: Choice,
    *,
    solver: str,
    status: PlanStatus,
    bound: float | None,
    penalised: float | None,
    stats: SolveStats,
    left_out_reason: UnplannedReason = UnplannedReason.CAPACITY,
) -> Plan:
    """Build the Plan of ``ch`` over ``tb``.

    Parameters
    ----------
    tb : Tables
        Problem arrays.
    ch : Choice
        One option per plannable row (``r == -1``: left out for ``left_out_reason``).
    solver : str
        Name recorded in the plan.
    status : PlanStatus
        Outcome.
    bound : float or None
        Lower bound on the penalised objective [objective units]; the plan reports it as ``penalised_bound`` and,
        less the penalties of the rows ``ch`` leaves out, as ``best_bound`` (a bound for plans of the same jobs).
    penalised : float or None
        Objective plus penalties of jobs left out [objective units], used for the gap.
    stats : SolveStats
        Statistics.
    left_out_reason : UnplannedReason
        Reason given to plannable rows left out.
    """
    problem = tb.problem
    cum_e = cumulative(np.ones((tb.R, tb.T)))
    cum_p = cumulative(tb.known_price())
    cum_c = cumulative(tb.known_carbon())
    assignments: list[Assignment] = []
    unplanned = list(tb.unplanned)
    hw_names = [h.name for h in problem.hardware]
    reg_names = [r.name for r in problem.regions]
    for row in range(tb.J):
        job = problem.jobs[int(tb.rows[row])]
        r = int(ch.r[row])
        if r < 0:
            detail = (
                "no room left beside the other jobs" if left_out_reason is UnplannedReason.CAPACITY else ""
            )
            unplanned.append(Unplanned(job.job_id, left_out_reason, detail))
            continue
        h = int(ch.h[row])
        kw = float(tb.g[row] * tb.pkw[row, h] * tb.pue[r])
        chunks = [(int(ch.s1[row]), int(ch.s1[row] + ch.l1[row]))]
        if ch.l2[row] > 0:
            chunks.append((int(ch.s2[row]), int(ch.s2[row] + ch.l2[row])))
        energy = cost = carbon = 0.0
        for s, e in chunks:
            energy += kw * tb.slot_h * float(cum_e[r, e] - cum_e[r, s])
            cost += kw * tb.slot_h * float(cum_p[r, e] - cum_p[r, s])
            carbon += kw * tb.slot_h * float(cum_c[r, e] - cum_c[r, s])
        assignments.append(
            Assignment(
                job.job_id,
                reg_names[r],
                hw_names[h],
                tuple(Chunk(s, e) for s, e in chunks),
                energy,
                cost,
                carbon,
            )
        )
    stats = _with_estimates(tb, ch, stats)
    cost = float(sum(a.cost for a in assignments))
    carbon = float(sum(a.carbon_kg for a in assignments))
    energy = float(sum(a.energy_kwh for a in assignments))
    objective = objective_value(problem, cost, carbon)
    if bound is not None and not math.isfinite(bound):
        bound = None  # no bound known (a plan's figures are numbers or None, never inf in JSON)
    # a plan of the same jobs pays the same penalties: its objective is at least the bound less those
    planned_bound = None if bound is None else min(objective, bound - float(tb.penalty[ch.r < 0].sum()))
    if not problem.jobs:
        status = PlanStatus.EMPTY
    return Plan(
        solver=solver,
        status=status,
        assignments=tuple(assignments),
        unplanned=tuple(unplanned),
        objective=objective,
        best_bound=planned_bound,
        gap_pct=gap_pct(penalised if penalised is not None else objective, bound),
        cost=cost,
        carbon_kg=carbon,
        energy_kwh=energy,
        stats=stats,
        penalised_bound=bound,
    )


def _with_estimates(tb: Tables, ch: Choice, stats: SolveStats) -> SolveStats:
    """``stats`` with a note for each figure that counts 0 where a planned run has no price or carbon intensity
    (a curve the objective does not need may be missing)."""
    notes = []
    on = ch.r >= 0
    r = ch.r[on]
    for figure, known, what in (
        ("cost", tb.price_known, "a price"),
        ("carbon_kg", tb.carbon_known, "a carbon intensity"),
    ):
        if known.all():
            continue
        cum = cumulative((~known).astype(float))
        n = 0.0
        for s, ln in ((ch.s1[on], ch.l1[on]), (ch.s2[on], ch.l2[on])):
            n += float((cum[r, s + ln] - cum[r, s]).sum())
        if n:
            notes.append(f"estimate: {figure} counts 0 for {int(n)} job-slot(s) without {what}")
    return dataclasses.replace(stats, notes=stats.notes + tuple(notes)) if notes else stats


def choice_of(tb: Tables, plan: Plan) -> Choice:
    """The rows of ``tb`` placed as in ``plan`` (the inverse of :func:`assemble_plan`): a plan of the same jobs
    under another objective, as a start. Jobs ``tb`` does not plan, runs of more than two chunks and runs over slots
    where ``tb`` does not let a job run are left out."""
    ch = Choice.empty(tb.J)
    row_of = {tb.problem.jobs[int(i)].job_id: row for row, i in enumerate(tb.rows)}
    reg = {r.name: k for k, r in enumerate(tb.problem.regions)}
    hw = {h.name: k for k, h in enumerate(tb.problem.hardware)}
    for a in plan.assignments:
        row = row_of.get(a.job_id)
        if row is None or not 1 <= len(a.chunks) <= 2:
            continue
        r, h = reg[a.region], hw[a.hardware]
        if not tb.elig[row, r, h] or not all(tb.valid[r, c.start_slot : c.end_slot].all() for c in a.chunks):
            continue
        first, second = a.chunks[0], a.chunks[-1] if len(a.chunks) == 2 else None
        ch.set(
            row,
            Option(
                r,
                h,
                first.start_slot,
                first.length_slots,
                second.start_slot if second is not None else 0,
                second.length_slots if second is not None else 0,
            ),
        )
    return ch
