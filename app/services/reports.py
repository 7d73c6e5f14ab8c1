"""Energy, cost and carbon accounting: per-job receipts and monthly reports per tenant and region.

Each job with a plan or a run gives one ledger entry:

* **metered** when its latest run finished with a metered energy reading (``runs.energy_kwh``, IT energy of the
  GPUs), or when the job ended (cancelled, failed, unschedulable) after runs that were metered. Every finished run
  with a reading counts, failed and cancelled attempts too, since they drew power: a chunk's run counts once per
  chunk of its assignment (a redelivered chunk: its latest run). Each run's facility energy is its reading times its
  region's PUE, like the planner's figures; the run's cost and carbon (computed by the status sync on facility
  energy) are used, and where a run did not record them they are the planned price and intensity per kWh applied
  to its facility energy. A chunked assignment (an interruptible job run as one run per chunk) is metered once its
  last chunk has; before that, like a job whose retry has not finished, it is reported on its plan;
* **planned** otherwise, from its assignment: the one its run executed, else the current plan's, else (for a job
  still open) the newest. A job cancelled, failed or found unschedulable without a metered run used nothing and
  gives no entry, whatever plans it was once in.

An entry belongs to the UTC month in which it starts (its first counted run's start, else planned start). Savings compare an entry with
the run-now counterfactual stored on its assignment (the same job started at release in its home region).

Carbon is reported two ways, following the GHG Protocol Scope 2 guidance (2015): **location-based** with the grid's
average intensity, and **market-based** where energy contracts (PPAs, guarantees of origin) cover a share of a
region's consumption: ``E * (s * contract intensity + (1 - s) * location intensity)``, where the location intensity
stands in for the residual mix (an approximation: residual-mix factors are not in the data). Market-based figures
are given only for regions with a contract.

Costs are converted to the tenant's reporting currency (its own, else ``GRIDSHIFT_REPORTING_CURRENCY``) with
``fx_rates`` (units of the configured reporting currency per unit of another currency): a plan's figures from the
currency it was made in, a run's cost (priced by the status sync with its zone's own series) from its region's
currency. A missing rate is an error naming the currency rather than a silently mixed sum.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from app.db import utcnow
from app.enums import TERMINAL_JOB_STATES, JobState, RunState
from app.errors import FieldError, NotFound, ValidationFailed
from app.models import Assignment, Cluster, EnergyContract, Job, Region, Run, Tenant
from app.services.assignments import current_plan_id
from app.services.auth import Principal
from app.services.tenancy import budget_columns

METERED, PLANNED = "metered", "planned"
TENANT_CURRENCY_DEFAULT = "EUR"  # tenants.reporting_currency of a tenant with no currency of its own
# Jobs that ended without running to completion: billed on what their runs metered, never on a plan.
UNBILLED_UNLESS_METERED = frozenset({JobState.CANCELLED, JobState.FAILED, JobState.UNSCHEDULABLE})


@dataclass(frozen=True, slots=True)
class Entry:
    """One job's accounting: what it used (or is planned to use) and its run-now counterfactual."""

    job_id: int
    job_name: str
    tenant: str
    state: str
    basis: str  # metered | planned
    region: str
    hardware: str
    gpu_count: int
    start_at: datetime
    end_at: datetime
    runtime_job_id: str | None
    energy_source: str | None  # nvml | accounting | estimate | None (planned)
    planned_energy_kwh: float
    metered_energy_kwh: float | None  # metered IT (GPU) energy [kWh]
    energy_kwh: float  # facility energy: planned, or metered x PUE [kWh]
    cost: float  # [reporting currency]
    currency: str
    carbon_kg: float  # location-based [kgCO2eq]
    carbon_market_kg: float | None  # market-based where a contract covers the region [kgCO2eq]
    run_now_energy_kwh: float | None
    run_now_cost: float | None  # [reporting currency]
    run_now_carbon_kg: float | None

    @property
    def saving_cost(self) -> float | None:
        """Run-now cost minus this entry's cost [reporting currency]; positive is a saving."""
        return None if self.run_now_cost is None else self.run_now_cost - self.cost

    @property
    def saving_carbon_kg(self) -> float | None:
        """Run-now emissions minus this entry's location-based emissions [kgCO2eq]."""
        return None if self.run_now_carbon_kg is None else self.run_now_carbon_kg - self.carbon_kg


@dataclass(frozen=True, slots=True)
class ReportRow:
    """Sums over the entries of one month, tenant and region ("all" in the totals row)."""

    month: str
    tenant: str
    region: str
    currency: str
    jobs: int
    metered_jobs: int
    energy_kwh: float
    cost: float
    carbon_kg: float
    carbon_market_kg: float | None
    run_now_cost: float
    run_now_carbon_kg: float
    saving_cost: float
    saving_carbon_kg: float
    budget: Mapping[str, Any] | None = None  # the tenant's budgets in this month's period (tenancy.budget_columns)

    @property
    def saving_pct(self) -> float | None:
        """Cost saving against run-now [%] of the run-now cost."""
        return 100.0 * self.saving_cost / self.run_now_cost if self.run_now_cost > 0 else None


@dataclass(frozen=True, slots=True)
class MonthlyReport:
    month: str
    start: datetime
    end: datetime
    currency: str
    tenant: str  # a slug, or "all" for an operator's fleet-wide report
    rows: tuple[ReportRow, ...]
    total: ReportRow
    generated_at: datetime


def month_range(month: str | None, now: datetime | None = None) -> tuple[str, datetime, datetime]:
    """``"2030-01"`` -> (label, first instant, first instant of the next month), UTC; None means this month."""
    if month is None:
        now = now or utcnow()
        year, mon = now.year, now.month
    else:
        try:
            year_s, mon_s = month.split("-")
            year, mon = int(year_s), int(mon_s)
            if not (1 <= mon <= 12 and 2000 <= year <= 2200) or len(mon_s) != 2:
                raise ValueError
        except ValueError as exc:
            raise ValidationFailed("bad month", [FieldError("month", "expected YYYY-MM, e.g. 2030-01")]) from exc
    start = datetime(year, mon, 1, tzinfo=UTC)
    end = datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=UTC)
    return f"{year:04d}-{mon:02d}", start, end


def tenant_currency(tenant: Tenant | None, configured: str) -> str:
    """The currency ``tenant`` reports in: its own, else the deployment's ``GRIDSHIFT_REPORTING_CURRENCY``.

    ``tenants.reporting_currency`` holds the column's default (EUR) unless a currency was chosen for the tenant, so
    the default stands for "none of its own".
    """
    own = tenant.reporting_currency if tenant is not None else None
    return own if own and own != TENANT_CURRENCY_DEFAULT else configured


def _rate(fx_rates: Mapping[str, float], currency: str, target: str, configured: str) -> float:
    """Units of ``target`` per unit of ``currency``.

    ``fx_rates`` gives units of the configured reporting currency per unit of another currency (``GBP=1.17``), so a
    tenant reporting in a currency of its own goes through the configured one.
    """
    if currency == target:
        return 1.0

    def per_unit(cur: str) -> float:  # units of the configured currency per unit of ``cur``
        if cur == configured:
            return 1.0
        rate = fx_rates.get(cur)
        if rate is None:
            raise ValidationFailed(
                f"no exchange rate from {currency} to the reporting currency {target}",
                [FieldError("currency", f"GRIDSHIFT_FX_RATES has no rate for {cur} ({cur}=<{configured} per {cur}>)")],
            )
        return float(rate)

    return per_unit(currency) / per_unit(target)


def _pick_assignments(session: Session, jobs: Sequence[Job], runs: Mapping[int, Run]) -> dict[int, Assignment]:
    """Per job: the assignment its run executed, else the current plan's, else (open jobs only) the newest plan's.

    A job that has ended keeps an older plan's placement only through a run that executed it: a cancelled job that
    a later plan left out never ran there. Light id queries pick one assignment per job first; only the picked rows
    are loaded as objects.
    """
    if not jobs:
        return {}
    job_ids = [j.id for j in jobs]
    open_ids = {j.id for j in jobs if j.state not in TERMINAL_JOB_STATES}
    newest = dict(session.execute(
        select(Assignment.job_id, func.max(Assignment.id)).where(Assignment.job_id.in_(job_ids))
        .group_by(Assignment.job_id)
    ).all())  # assignment ids grow with each plan
    current_plan = current_plan_id(session)
    current = {} if current_plan is None else dict(session.execute(
        select(Assignment.job_id, Assignment.id).where(Assignment.plan_id == current_plan,
                                                       Assignment.job_id.in_(job_ids))
    ).all())
    chosen: dict[int, int] = {}
    for jid, newest_id in newest.items():
        run = runs.get(jid)
        aid = (run.assignment_id if run is not None and run.assignment_id else None) or current.get(jid)
        if aid is None and jid in open_ids:
            aid = newest_id
        if aid is not None:
            chosen[jid] = aid
    rows = session.scalars(
        select(Assignment).where(Assignment.id.in_(list(chosen.values())))
        .options(selectinload(Assignment.region), selectinload(Assignment.hardware_type))
    )
    by_id = {a.id: a for a in rows}
    return {jid: by_id[aid] for jid, aid in chosen.items() if aid in by_id}


def _job_runs(session: Session, job_ids: Sequence[int]) -> dict[int, list[Run]]:
    """Per job, its runs oldest first."""
    out: dict[int, list[Run]] = defaultdict(list)
    if job_ids:
        for run in session.scalars(select(Run).where(Run.job_id.in_(job_ids)).order_by(Run.id)):
            out[run.job_id].append(run)
    return out


def _latest_runs(session: Session, job_ids: Sequence[int]) -> dict[int, Run]:
    return {jid: runs[-1] for jid, runs in _job_runs(session, job_ids).items()}


def _counted_runs(runs: Sequence[Run]) -> list[Run]:
    """The runs whose energy is billed: every finished run with a reading, a chunk's once (its latest run)."""
    out: dict[tuple[str, int | None, int], Run] = {}
    for r in runs:
        if r.finished_at is None or r.energy_kwh is None:
            continue
        if r.chunk_index is not None and r.state == RunState.SUCCEEDED:
            out[("chunk", r.assignment_id, int(r.chunk_index))] = r  # a redelivered chunk counts once
        else:
            out[("run", None, r.id)] = r
    return list(out.values())


def _work_done(runs: Sequence[Run], a: Assignment) -> bool:
    """Whether the latest run finished the work with a reading: for a chunk, every chunk of its assignment did."""
    latest = runs[-1]
    if latest.finished_at is None or latest.energy_kwh is None:
        return False
    if latest.chunk_index is None or latest.assignment_id != a.id:
        return True
    by_chunk = {int(r.chunk_index or 0): r for r in runs
                if r.assignment_id == a.id and r.chunk_index is not None and r.state == RunState.SUCCEEDED}
    n = len(a.chunks or ())
    return n > 0 and sorted(by_chunk) == list(range(n)) and all(r.energy_kwh is not None for r in by_chunk.values())


def _contracts(session: Session, tenant_ids: Iterable[int]) -> list[EnergyContract]:
    """The fleet's contracts (no tenant) and those of ``tenant_ids``: a tenant's private contract is its own."""
    return list(session.scalars(select(EnergyContract).where(
        EnergyContract.tenant_id.is_(None) | EnergyContract.tenant_id.in_(list(set(tenant_ids))))))


def _market_carbon_kg(
    contracts: Iterable[EnergyContract], tenant_id: int, region_id: int, at: datetime, energy_kwh: float,
    location_kg: float,
) -> float | None:
    """Market-based emissions [kgCO2eq], or None when no contract exists for the region at all."""
    mine = [c for c in contracts if c.region_id == region_id and c.tenant_id in (None, tenant_id)]
    if not mine:
        return None
    active = [c for c in mine if c.start_at <= at < c.end_at]
    share = min(1.0, sum(max(0.0, c.share) for c in active))
    if share <= 0 or energy_kwh <= 0:
        return location_kg
    covered_g = sum(c.share * c.carbon_g_per_kwh for c in active) / sum(c.share for c in active)
    location_g = 1000.0 * location_kg / energy_kwh
    return energy_kwh * (share * covered_g + (1.0 - share) * location_g) / 1000.0


def build_entries(
    session: Session, jobs: Sequence[Job], *, currency_of: Mapping[int, str],
    fx_rates: Mapping[str, float] | None = None, configured_currency: str = "EUR",
) -> list[Entry]:
    """Ledger entries of ``jobs`` (those with neither a plan nor a metered run are left out).

    ``currency_of`` maps a tenant id to its reporting currency; ``fx_rates`` are units of ``configured_currency``
    (``GRIDSHIFT_REPORTING_CURRENCY``) per unit of another currency.
    """
    fx_rates = fx_rates or {}
    ids = [j.id for j in jobs]
    all_runs = _job_runs(session, ids)
    runs = {jid: rs[-1] for jid, rs in all_runs.items()}
    assignments = _pick_assignments(session, jobs, runs)
    contracts = _contracts(session, (j.tenant_id for j in jobs))
    slugs = dict(session.execute(select(Tenant.id, Tenant.slug)).all())
    regions = {r.id: r for r in session.scalars(select(Region))}
    cluster_region = dict(session.execute(select(Cluster.id, Cluster.region_id)).all())
    out: list[Entry] = []
    for job in jobs:
        a = assignments.get(job.id)
        if a is None:
            continue
        run = runs.get(job.id)
        reporting = currency_of.get(job.tenant_id, configured_currency)
        rate = _rate(fx_rates, a.currency, reporting, configured_currency)
        job_runs = all_runs.get(job.id, [])
        counted = _counted_runs(job_runs)
        metered = bool(counted) and (_work_done(job_runs, a) or job.state in UNBILLED_UNLESS_METERED)
        if not metered and job.state in UNBILLED_UNLESS_METERED:
            continue  # it ended without using metered energy: nothing was used, whatever was planned
        metered_kwh: float | None = None
        if metered:
            per_kwh_cost = a.cost / a.energy_kwh if a.energy_kwh else 0.0
            per_kwh_carbon = a.carbon_kg / a.energy_kwh if a.energy_kwh else 0.0
            metered_kwh = energy = cost = carbon = 0.0
            for r in counted:
                # A run is in its cluster's region (a retry may run elsewhere than the plan row picked here).
                region = regions.get(cluster_region.get(r.cluster_id or 0, -1)) or a.region
                facility_kwh = float(r.energy_kwh or 0.0) * (region.pue or 1.0)  # metered IT -> facility energy
                metered_kwh += float(r.energy_kwh or 0.0)
                energy += facility_kwh
                # The status sync prices a run with its zone's own series, in the region's currency; the plan's
                # rows are in the currency the plan was made in.
                if r.cost is not None:
                    cost += r.cost * _rate(fx_rates, region.currency, reporting, configured_currency)
                else:
                    cost += facility_kwh * per_kwh_cost * rate
                carbon += r.carbon_kg if r.carbon_kg is not None else facility_kwh * per_kwh_carbon
            starts = [r.started_at for r in counted if r.started_at is not None]
            start = min(starts) if starts else (counted[0].submitted_at or a.start_at)
            end = max(r.finished_at or a.end_at for r in counted)
        else:
            energy, cost, carbon, start, end = a.energy_kwh, a.cost * rate, a.carbon_kg, a.start_at, a.end_at
        market = _market_carbon_kg(contracts, job.tenant_id, a.region_id, start, energy, carbon)
        out.append(Entry(
            job_id=job.id, job_name=job.name, tenant=slugs.get(job.tenant_id, str(job.tenant_id)),
            state=job.state.value, basis=METERED if metered else PLANNED,
            region=a.region.code, hardware=a.hardware_type.code, gpu_count=job.gpu_count,
            start_at=start, end_at=end, runtime_job_id=run.runtime_job_id if run else None,
            energy_source=counted[-1].energy_source if metered else None,
            planned_energy_kwh=a.energy_kwh, metered_energy_kwh=metered_kwh,
            energy_kwh=energy, cost=cost, currency=reporting, carbon_kg=carbon, carbon_market_kg=market,
            run_now_energy_kwh=a.run_now_energy_kwh,
            run_now_cost=None if a.run_now_cost is None else a.run_now_cost * rate,
            run_now_carbon_kg=a.run_now_carbon_kg,
        ))
    return out


def receipt(
    session: Session, principal: Principal, job_id: int, *, fx_rates: Mapping[str, float] | None = None,
    configured_currency: str = "EUR",
) -> tuple[Job, Entry | None, Run | None, str]:
    """A job's receipt: its entry (None before it is planned), its latest run and the tenant's reporting currency.

    Other tenants get 404.
    """
    job = session.get(Job, job_id) if 0 < job_id < 2**31 else None  # ids are 32-bit in the database
    if job is None or job.tenant_id != principal.tenant_id:
        raise NotFound(f"job {job_id}")
    currency = tenant_currency(session.get(Tenant, job.tenant_id), configured_currency)
    entries = build_entries(session, [job], currency_of={job.tenant_id: currency}, fx_rates=fx_rates,
                            configured_currency=configured_currency)
    return job, (entries[0] if entries else None), _latest_runs(session, [job.id]).get(job.id), currency


def _sum_row(month: str, tenant: str, region: str, currency: str, entries: Sequence[Entry],
             contract_covers: bool = False, budget: Mapping[str, Any] | None = None) -> ReportRow:
    """``contract_covers``: a contract of this row's tenant or of the fleet covers its region (market-based CO2)."""
    with_cf = [e for e in entries if e.run_now_cost is not None]
    with_cf_c = [e for e in entries if e.run_now_carbon_kg is not None]
    market: float | None = None
    if any(e.carbon_market_kg is not None for e in entries) or contract_covers:
        market = math.fsum(e.carbon_market_kg if e.carbon_market_kg is not None else e.carbon_kg for e in entries)
    return ReportRow(
        month=month, tenant=tenant, region=region, currency=currency, jobs=len(entries),
        metered_jobs=sum(e.basis == METERED for e in entries),
        energy_kwh=math.fsum(e.energy_kwh for e in entries), cost=math.fsum(e.cost for e in entries),
        carbon_kg=math.fsum(e.carbon_kg for e in entries), carbon_market_kg=market,
        run_now_cost=math.fsum(e.run_now_cost or 0.0 for e in with_cf),
        run_now_carbon_kg=math.fsum(e.run_now_carbon_kg or 0.0 for e in with_cf_c),
        saving_cost=math.fsum(e.saving_cost or 0.0 for e in with_cf),
        saving_carbon_kg=math.fsum(e.saving_carbon_kg or 0.0 for e in with_cf_c), budget=budget,
    )


def monthly_report(
    session: Session,
    principal: Principal,
    month: str | None = None,
    *,
    region: str | None = None,
    tenant: str | None = None,
    fx_rates: Mapping[str, float] | None = None,
    configured_currency: str = "EUR",
    now: datetime | None = None,
) -> MonthlyReport:
    """Per tenant and region sums of the entries starting in ``month`` (YYYY-MM, UTC).

    A tenant sees only its own jobs. An operator admin sees every tenant ("all") or the one named by ``tenant``.
    """
    label, start, end = month_range(month, now)
    fleet_wide = principal.is_fleet_admin
    if tenant is not None and not fleet_wide and tenant != principal.tenant_slug:
        raise NotFound(f"tenant {tenant!r}")
    q = select(Job)
    if not fleet_wide:
        q = q.where(Job.tenant_id == principal.tenant_id)
        scope = principal.tenant_slug
    elif tenant is not None:
        t = session.scalar(select(Tenant).where(Tenant.slug == tenant))
        if t is None:
            raise NotFound(f"tenant {tenant!r}")
        q = q.where(Job.tenant_id == t.id)
        scope = tenant
    else:
        scope = "all"
    # Only jobs with an assignment or a run overlapping the month can start in it.
    in_month = select(Assignment.job_id).where(Assignment.start_at < end, Assignment.end_at >= start)
    ran = select(Run.job_id).where(Run.started_at < end, Run.started_at >= start)
    jobs = list(session.scalars(q.where(Job.id.in_(in_month) | Job.id.in_(ran)).order_by(Job.id)))
    tenants = {t.id: t for t in session.scalars(select(Tenant))}
    own = tenants.get(principal.tenant_id)
    currency = tenant_currency(own, configured_currency)
    # One report, one currency: every tenant's costs are converted to the reader's reporting currency.
    entries = build_entries(session, jobs, currency_of=dict.fromkeys(tenants, currency), fx_rates=fx_rates,
                            configured_currency=configured_currency)
    entries = [e for e in entries if start <= e.start_at < end and (region is None or e.region == region)]
    if region is not None and session.scalar(select(Region.id).where(Region.code == region)) is None:
        known = ", ".join(session.scalars(select(Region.code).order_by(Region.code))) or "none"
        raise ValidationFailed("unknown region", [FieldError("region", f"unknown region {region!r} (known: {known})")])
    # (tenant slug, region) pairs with a contract; None for the fleet's contracts, which cover every tenant
    covered = {
        (None if tid is None else tenants[tid].slug, code) for tid, code in session.execute(
            select(EnergyContract.tenant_id, Region.code).join(Region, EnergyContract.region_id == Region.id)
            .where(EnergyContract.tenant_id.is_(None) | EnergyContract.tenant_id.in_(list({j.tenant_id for j in jobs}))))
    }
    groups: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    for e in entries:
        groups[(e.tenant, e.region)].append(e)
    budgets = budget_columns(session)
    rows = tuple(
        _sum_row(label, t, r, currency, groups[(t, r)], (None, r) in covered or (t, r) in covered, budgets.get(t))
        for t, r in sorted(groups)
    )
    total = _sum_row(label, scope, "all", currency, entries, budget=budgets.get(scope))
    return MonthlyReport(label, start, end, currency, scope, rows, total, now or utcnow())
