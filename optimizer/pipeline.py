"""The planner's shared state: the best plan so far (``Incumbent``), one solve's state (``SolveRun``) and the time
shares of its phases, declared as data.

Every phase of :mod:`optimizer.solve` is a function ``phase(run: SolveRun) -> None``: it decides from the run's
state whether it applies, offers the plans it finds to ``run.best`` (which keeps the better one) and records its
wall time with ``run.lap``. Adding a phase is adding one function and one entry in the pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from optimizer.bound import Choice, Multipliers, choice_cost
from optimizer.candidates import Candidates
from optimizer.heuristic import penalised_objective
from optimizer.parallel import Child
from optimizer.plan import PlanStatus
from optimizer.problem import ObjectiveKind, SolveParams
from optimizer.tables import Tables

#: Time shares of the phases: the fraction of the time left (``run.left()``) a phase may take, or, for the
#: ``*_min_left`` entries, the fraction of the whole limit that must be left for a phase to start.
SHARE: Mapping[str, float] = MappingProxyType(
    {
        # carbon_cost_cap: the cost plan it starts from (the cap is met whenever that plan meets it); 60 jobs in 3 s,
        # cap 1.02 x the 3-s cost plan: a start on 0.3 of the time missed it, one on 0.5 met it
        "cost_start": 0.5,
        # column generation on the LP of the aggregated model
        "lp_colgen": 0.7,
        # the LP stays in the loop while jobs are fixed a few at a time (1,000 jobs, seeds 0/1/2: 783.7, 648.7,
        # 830.2 in 2-5 s, against 799.1, 780.7, 840.4 from the plain rounding); started while this much is left
        "lp_dive_min_left": 0.3,
        # share of the time left after the LP that the dive may take (it completes its plan greedily when time
        # runs out)
        "lp_dive": 0.7,
        # ejection moves and repair for the jobs each dive leaves out (1,000 jobs over one day, seed 3: the dives end
        # 1-2 jobs short of a plan 0.6 % above the LP)
        "dive_repair": 0.15,
        # more subgradient steps when the LP did not converge, started while this much is left
        "lp_lagrangian_min_left": 0.5,
        "lp_lagrangian": 0.15,
        # subgradient ascent off the LP path (at least 0.05 s)
        "lagrangian": 0.3,
        # master LP and its rounding: 12-28 s at 10,000 jobs on a loaded 2-core machine
        "master_lp": 0.7,
        # a priced placement starts only while it can finish: greedy time plus this share of the limit; off the LP
        # path the placements after the first one need this much of the limit left
        "priced_min_left": 0.05,
        "priced_more_min_left": 0.6,
        # ejection moves for the jobs a priced placement left out
        "place_left_out": 0.1,
        # ejection moves and repair for the jobs the best plan leaves out
        "eject_left_out": 0.1,
        "repair": 0.2,
        # local search: all the time left when nothing else needs it, half when CP-SAT or the bound still do
        "local_search": 0.95,
        "local_search_shared": 0.5,
        # fast single-job moves: this share of the local-search time, spread over their starts
        "improve_fast": 0.5,
        # the MIP around the best plan in this process (one worker): this share of the time left
        "rins_in_process": 0.5,
        # re-chunking interruptible jobs over every split: ~1.7 ms a job (1,000 bench jobs, 202 interruptible: 0.35 s
        # for all, 0.02 % saved), the costliest first
        "rechunk": 0.05,
        # group moves when the fast moves did not stall, the other half going to ``improve`` (1,000 jobs, 10 s,
        # seeds 0/1/2: 793.61/663.80/836.25; none: 793.54/663.84/837.48; 85 %: 793.62/663.80 for seeds 0/1)
        "recreate_not_stalled": 0.5,
    }
)
# time left [s] below which the MIP around the best plan is not started: at 1,000 jobs in 10 s it gets ~5 s and
# found nothing better in 3 of 3 seeds, in 30 s it gets ~25 s (seed 1: 650.5 against 663.0 without it)
RINS_MIN_S = 8.0
# the same on the second worker, where the MIP costs the moves on the first one nothing: at 1,000 jobs released over
# one day the LP converges in ~0.3 s and the MIP over its columns, started with 3-5 s left, found plans the moves
# did not (seed 6: 2.22 -> 1.31 % from the bound, twice; the other nine seeds unchanged or lower)
RINS_WORKER_MIN_S = 3.0
# time [s] the moves leave at the end to collect the MIP's plan and go on from it; the MIP gets the rest (ending it
# at 0.7 or 0.5 of the time left, for more group moves from its plan after, did no better: 1,000 jobs in 30 s,
# seeds 0/1/2, 1.86/1.53/0.68 % against 1.87/1.73/0.67 % and 1.85/1.72/0.67 %)
RINS_RESERVE_S = 0.8
# time [s] per (interruptible job of more than two chunks, hardware) pair kept at the end for the bound over every
# chunking (jobs of at most two chunks are priced over every split at once, ``optimizer.chunking``)
# (``chunking.valid_bound``): 1,000 bench jobs, 202 interruptible on 1,212 pairs, took 0.59 s on a loaded 2-core machine
CHUNK_BOUND_S_PER_PAIR = 5e-4


def cap_ok(tb: Tables, ch: Choice) -> bool:
    """Whether plan ``ch`` meets the cost cap of a ``carbon_cost_cap`` objective (always true for the others)."""
    obj = tb.problem.objective
    if obj.kind is not ObjectiveKind.CARBON_WITH_COST_CAP or obj.cost_cap is None:
        return True
    return choice_cost(tb, ch) <= obj.cost_cap * (1 + 1e-9)


def score_plan(tb: Tables, ch: Choice) -> float:
    """Penalised objective of plan ``ch``, +inf when it breaks the cost cap."""
    return penalised_objective(tb, ch) if cap_ok(tb, ch) else float("inf")


class Incumbent:
    """The best plan so far and its score (:func:`score_plan`); every phase offers its plans here.

    ``starts`` collects the plans offered as starts for the fast moves (on the LP path every one of them goes
    through the moves: which one ends lowest varies).
    """

    def __init__(self, tb: Tables, plan: Choice, notes: list[str]) -> None:
        self.tb = tb
        self.plan = plan
        self.score = score_plan(tb, plan)
        self.notes = notes
        self.starts: list[Choice] = [plan]

    def offer(
        self,
        cand: Choice,
        *,
        ties: bool = False,
        rel_tol: float = 0.0,
        start: bool = False,
        label: str | None = None,
        extra: str = "",
    ) -> bool:
        """Keep ``cand`` if it scores lower (or, with ``ties``, no higher, within ``rel_tol``); returns whether kept.

        ``start`` also records it as a start for the fast moves; ``label`` notes ``"<label> objective=<score>"``
        followed by ``extra``.
        """
        score = score_plan(self.tb, cand)
        if start:
            self.starts.append(cand)
        if label is not None:
            self.notes.append(f"{label} objective={score:.6g}{extra}")
        if score < self.score or (ties and score <= self.score + rel_tol * max(1.0, abs(self.score))):
            self.plan, self.score = cand, score
            return True
        return False

    @property
    def found(self) -> bool:
        """Whether a plan within the cost cap is known."""
        return bool(np.isfinite(self.score))

    @property
    def leaves_out(self) -> bool:
        """Whether the best plan leaves a plannable job out."""
        return bool((self.plan.r < 0).any())


@dataclass(eq=False)
class SolveRun:
    """State of one solve, read and written by the phases.

    The first block is fixed when the run starts (after the greedy plan); the rest is filled in by the phases in
    pipeline order.
    """

    tb: Tables
    params: SolveParams
    t0: float  # perf_counter at the start [s]
    limit: float  # time limit [s]; the MIP's reserve is taken off while it runs on the second worker
    best: Incumbent
    notes: list[str]
    phases: dict[str, float]
    t: float  # perf_counter at the end of the last phase [s]
    capped: bool  # carbon_cost_cap objective
    order: np.ndarray  # greedy order (least slack first)
    big_first: np.ndarray  # biggest jobs first
    found0: list  # per-pair best starts at true cost (from the first Lagrangian evaluation)
    ch0: Choice  # every job at its own best option (capacity ignored)
    cand0: Candidates  # candidates at true cost
    eval_s: float  # one Lagrangian evaluation [s], to keep the resumed ascent in time
    greedy_s: float  # one greedy placement [s]
    upper: float  # the greedy plan's objective (the Polyak target while no plan meets the cost cap)
    cls: np.ndarray  # job class of each row
    rep: np.ndarray  # representative row of each class
    counts: np.ndarray  # jobs per class
    lp_path: bool  # column generation (else subgradient ascent)
    use_cpsat: bool  # CP-SAT tightens plan and bound at the end
    cand_ls: Candidates  # candidates the local search moves over
    m: Multipliers  # capacity prices: LP duals or Lagrange multipliers
    reserve: float = 0.0  # time [s] kept after ``limit`` for the bound over every chunking
    unreached: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # rows the first plan missed
    lower: float = -np.inf  # best valid bound so far (at least the Lagrangian value at zero prices)
    bound_any_chunking: float = -np.inf  # a bound that holds for every chunking (CP-SAT over every option)
    lp_converged: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # column generation's report
    lp_sol: tuple[np.ndarray, np.ndarray] | None = None  # (class per row, LP solution) for the targeted moves
    ascent: Child | None = None  # subgradient ascent on the second worker
    rins_child: Child | None = None  # the MIP around the best plan on the second worker
    bound_open: bool = True  # the bound still gains from more subgradient steps at the end
    share: float = 0.95  # share of the time left for the local search
    nu_ls: float = 0.0  # cost-cap price of the local search
    stalled: bool = True  # the fast moves stopped on a pass without a move
    closed: bool = False  # plan and bound meet
    bound: float = -np.inf  # the bound reported
    status: PlanStatus = PlanStatus.FEASIBLE
    cp_status: str = ""
    n_options: int = 0
    coarse: Any = None  # the hourly solve on the second worker (``optimizer.coarse.Pending``)

    def left(self) -> float:
        """Time left [s]."""
        return self.limit - (time.perf_counter() - self.t0)

    def lap(self, key: str) -> None:
        """Record the time since the last lap as phase ``key`` [s]."""
        now = time.perf_counter()
        self.phases[key] = round(now - self.t, 4)
        self.t = now

    def polyak_target(self) -> float:
        """The ascent's Polyak target: the best plan's score, or the greedy plan's objective while none meets the
        cost cap."""
        return self.best.score if self.best.found else self.upper


Phase = Callable[[SolveRun], None]
