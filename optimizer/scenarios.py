"""Planning under forecast uncertainty: quantile scenarios, a risk-adjusted curve, and the choice between plans.

A forecast gives each hour a point value and quantiles (q10, q50, q90). The planner's objective is linear in the
curves, so a plan's expected cost under a distribution is its cost on the expected curve; three weighted quantile
paths approximate that expectation (Swanson's rule: 0.3 / 0.4 / 0.3 on q10 / q50 / q90). Two uses here:

* :func:`risk_adjusted` builds the curve to plan on: the 3-point expected value plus ``risk_weight`` times half the
  q10-q90 spread, so hours whose forecast is uncertain look dearer (a mean-spread risk premium; published hours have
  no spread and do not move);
* :func:`choose_plan` scores candidate plans (e.g. one planned on the point forecast, one on the risk-adjusted curve)
  on the quantile scenarios and keeps the one with the lowest expected value plus ``risk_weight`` times its excess
  on the high scenario.

The scenarios are comonotone (every hour and region at its q90 together): the price paths the quantiles bound, not a
joint distribution; see docs/closed-loop.md for what that means for the figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optimizer.plan import Plan
from optimizer.problem import ObjectiveKind, Problem, Region

SWANSON = (0.3, 0.4, 0.3)  # weights of q10, q50, q90 in the 3-point expectation


@dataclass(frozen=True, slots=True)
class Quantiles:
    """One region's q10, q50 and q90 per slot of a curve [its unit]; equal where the value is known."""

    q10: tuple[float, ...]
    q50: tuple[float, ...]
    q90: tuple[float, ...]

    def __post_init__(self) -> None:
        if not len(self.q10) == len(self.q50) == len(self.q90):
            raise ValueError("Quantiles: q10, q50 and q90 must have one value per slot each")

    def path(self, k: int) -> tuple[float, ...]:
        """The ``k``-th path (0: q10, 1: q50, 2: q90)."""
        return (self.q10, self.q50, self.q90)[k]

    def adjusted(self, risk_weight: float, weights: Sequence[float] = SWANSON) -> tuple[float, ...]:
        """3-point expected value plus ``risk_weight`` x half the q10-q90 spread, per slot."""
        w10, w50, w90 = weights
        return tuple(w10 * a + w50 * b + w90 * c + risk_weight * (c - a) / 2.0
                     for a, b, c in zip(self.q10, self.q50, self.q90, strict=True))


@dataclass(frozen=True, slots=True)
class Uncertain:
    """The quantiles of price [per MWh] and carbon intensity [g/kWh] per region name."""

    price: Mapping[str, Quantiles]
    carbon: Mapping[str, Quantiles]


def with_region_curves(problem: Problem, price: Mapping[str, Sequence[float]],
                       carbon: Mapping[str, Sequence[float]]) -> Problem:
    """``problem`` with other price and carbon curves per region (one value per slot); all else kept."""
    regions = tuple(
        Region(r.name, tuple(price[r.name]), tuple(carbon[r.name]), r.power_budget_kw, r.inventory, r.pue,
               r.base_load_kw, r.inventory_per_slot, r.currency)
        for r in problem.regions
    )
    return Problem(problem.start, problem.slot_minutes, problem.n_slots, regions, problem.hardware, problem.jobs,
                   problem.objective, problem.currency, problem.fx_rates, problem.cost_scale)


def risk_adjusted(problem: Problem, uncertain: Uncertain, risk_weight: float) -> Problem:
    """``problem`` on the risk-adjusted curves of :meth:`Quantiles.adjusted` (price and carbon alike)."""
    return with_region_curves(
        problem,
        {r: q.adjusted(risk_weight) for r, q in uncertain.price.items()},
        {r: q.adjusted(risk_weight) for r, q in uncertain.carbon.items()},
    )


def scenario_problems(problem: Problem, uncertain: Uncertain) -> list[Problem]:
    """``problem`` on the q10, q50 and q90 paths of every region (comonotone scenarios)."""
    return [
        with_region_curves(problem, {r: q.path(k) for r, q in uncertain.price.items()},
                           {r: q.path(k) for r, q in uncertain.carbon.items()})
        for k in range(3)
    ]


def plan_value(problem: Problem, plan: Plan) -> float:
    """The plan's objective on ``problem``'s curves: cost [currency], carbon [kg] or cost plus priced carbon."""
    regions = {r.name: r for r in problem.regions}
    jobs = {j.job_id: j for j in problem.jobs}
    cost = carbon = 0.0
    for a in plan.assignments:
        r, j = regions[a.region], jobs[a.job_id]
        kw = j.gpus * problem.job_power_kw_per_gpu(j, a.hardware) * r.pue
        for c in a.chunks:
            for t in range(c.start_slot, c.end_slot):
                e = kw * problem.slot_hours
                cost += e * r.price_per_mwh[t] / 1000.0 * problem.fx(r.currency)
                carbon += e * r.carbon_g_per_kwh[t] / 1000.0
    kind = problem.objective.kind
    if kind is ObjectiveKind.COST:
        return cost
    if kind is ObjectiveKind.WEIGHTED:
        return cost + problem.objective.carbon_price_per_tonne * carbon / 1000.0
    return carbon


@dataclass(frozen=True, slots=True)
class Score:
    """A candidate plan's expected value on the scenarios, its excess on the high one, and expected + risk."""

    expected: float
    excess: float
    total: float


def score(plan: Plan, scenarios: Sequence[Problem], risk_weight: float,
          weights: Sequence[float] = SWANSON) -> Score:
    """Expected value over the q10/q50/q90 scenarios plus ``risk_weight`` x (value on q90 - expected)."""
    values = [plan_value(s, plan) for s in scenarios]
    expected = sum(w * v for w, v in zip(weights, values, strict=True))
    excess = max(0.0, values[-1] - expected)
    return Score(expected, excess, expected + risk_weight * excess)


def choose_plan(plans: Mapping[str, Plan], scenarios: Sequence[Problem], risk_weight: float,
                ) -> tuple[str, dict[str, Score]]:
    """The name of the candidate with the lowest expected value plus risk, and every candidate's score.

    A plan that leaves more jobs out is never preferred over one that places more (its lower value only means less
    work done); ties keep the first candidate given.
    """
    if not plans:
        raise ValueError("choose_plan: no candidate plans")
    scores = {name: score(p, scenarios, risk_weight) for name, p in plans.items()}
    best = min(plans, key=lambda n: (len(plans[n].unplanned), scores[n].total))
    return best, scores
