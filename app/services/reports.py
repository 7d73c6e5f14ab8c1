"""Energy, cost and carbon accounting: per-job receipts and monthly reports per tenant and region.

Each job with a plan or a run gives one ledger entry (shapes and sums in :mod:`app.services.ledger`):

* **settled** when its latest run finished with an energy reading (``runs.energy_kwh``, IT energy of the GPUs), or
  when the job ended (cancelled, failed, unschedulable) after runs that had one. Its basis is ``metered`` when every
  reading was measured (NVML, the runtime's accounting) and ``estimated`` when one was the runtime's estimate from
  the hardware's power profile. Every finished run with a reading counts, failed and cancelled attempts too, since
  they drew power: a chunk's run counts once per chunk of its assignment (a redelivered chunk: its latest run).
  Each run's facility energy is its reading times its region's PUE, like the planner's figures; the run's cost and
  carbon (computed by the status sync on facility energy) are used, and where a run did not record them they are
  the planned price and intensity per kWh applied to its facility energy. A chunked assignment (an interruptible
  job run as one run per chunk) is settled once its last chunk is; before that, like a job whose retry has not
  finished, it is reported on its plan;
* **planned** otherwise, from its assignment: the one its run executed, else the current plan's, else (for a job
  still open) the newest. A job cancelled, failed or found unschedulable without a metered run used nothing and
  gives no entry, whatever plans it was once in.

An entry belongs to the UTC month in which it starts (its first counted run's start, else planned start).

**Run-now counterfactual: the same work.** A planned entry is compared with the run-now plan stored on its
assignment (the planned duration, started at release in its home region). A settled entry is compared with the
work that actually ran: its metered IT energy over its metered run time, on the hardware it ran on, started at the
job's release (or submission, if later) in its home region (else where it ran), at that region's PUE, priced at
those hours' price and carbon intensity. Where the region's series have no value for those hours, the run-now
plan's price and intensity per kWh apply. A job of 20 s metered at 0.003 kWh is thus compared with 0.003 kWh drawn
for 20 s at release, not with the full slot the plan held for it.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from app.db import utcnow
from app.enums import TERMINAL_JOB_STATES, JobState, RunState, SeriesKind
from app.errors import FieldError, NotFound, ValidationFailed
from app.models import Assignment, Cluster, EnergyContract, Job, Region, Run, Tenant
from app.services.assignments import current_plan_id
from app.services.auth import Principal
from app.services.ledger import (
    ESTIMATED,
    METERED,
    PLANNED,
    Entry,
    MonthlyReport,
    ReportRow,
    month_range,
    rate,
    sum_row,
    tenant_currency,
)
from app.services.provenance import market_provenance
from app.services.series import hourly_series, priced

__all__ = ["ESTIMATED", "METERED", "PLANNED", "Entry", "MonthlyReport", "ReportRow", "build_entries",
           "monthly_report", "receipt"]
# Jobs that ended without running to completion: billed on what their runs metered, never on a plan.
UNBILLED_UNLESS_METERED = frozenset({JobState.CANCELLED, JobState.FAILED, JobState.UNSCHEDULABLE})


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


@dataclass(frozen=True, slots=True)
class _Used:
    """What a settled job's counted runs used: IT and facility energy, cost, carbon, and when and where."""

    it_kwh: float  # every counted run's IT energy [kWh]
    work_kwh: float  # the successful runs' IT energy: the work run now would have done [kWh]
    energy_kwh: float
    cost: float
    carbon_kg: float
    start: datetime
    end: datetime
    run_s: float  # the successful runs' metered time [s]
    region: Region  # where its last counted run ran
    basis: str  # metered | estimated


def _used(counted: Sequence[Run], a: Assignment, regions: Mapping[int, Region], cluster_region: Mapping[int, int],
          to_reporting: Callable[[str], float]) -> _Used:
    per_kwh_cost = a.cost / a.energy_kwh if a.energy_kwh else 0.0
    per_kwh_carbon = a.carbon_kg / a.energy_kwh if a.energy_kwh else 0.0
    it_kwh = energy = cost = carbon = 0.0
    region = a.region
    # The work itself is what the successful runs did: a failed attempt is this schedule's loss, not work that run
    # now would have repeated. A job that never succeeded (it ended failed or cancelled) did all its runs' work.
    work = [r for r in counted if r.state == RunState.SUCCEEDED] or list(counted)
    work_kwh = math.fsum(float(r.energy_kwh or 0.0) for r in work)
    run_s = math.fsum(max(0.0, (r.finished_at - r.started_at).total_seconds())
                      for r in work if r.started_at is not None and r.finished_at is not None)
    for r in counted:
        # A run is in its cluster's region (a retry may run elsewhere than the plan row picked here).
        region = regions.get(cluster_region.get(r.cluster_id or 0, -1)) or a.region
        facility_kwh = float(r.energy_kwh or 0.0) * (region.pue or 1.0)  # metered IT -> facility energy
        it_kwh += float(r.energy_kwh or 0.0)
        energy += facility_kwh
        # The status sync prices a run with its zone's own series, in the region's currency; the plan's rows are in
        # the currency the plan was made in.
        cost += r.cost * to_reporting(region.currency) if r.cost is not None else \
            facility_kwh * per_kwh_cost * to_reporting(a.currency)
        carbon += r.carbon_kg if r.carbon_kg is not None else facility_kwh * per_kwh_carbon
    starts = [r.started_at for r in counted if r.started_at is not None]
    start = min(starts) if starts else (counted[0].submitted_at or a.start_at)
    end = max(r.finished_at or a.end_at for r in counted)
    basis = ESTIMATED if any(r.energy_source == "estimate" for r in counted) else METERED
    return _Used(it_kwh, work_kwh, energy, cost, carbon, start, end, run_s, region, basis)


class _Series:
    """Hourly price and carbon series read once per zone and kind for a whole report."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.cache: dict[tuple[str, SeriesKind], dict[datetime, float]] = {}
        self.wanted: dict[str, tuple[datetime, datetime]] = {}

    def want(self, zone: str, start: datetime, end: datetime) -> None:
        lo, hi = self.wanted.get(zone, (start, end))
        self.wanted[zone] = (min(lo, start), max(hi, end))

    def values(self, zone: str, kind: SeriesKind) -> dict[datetime, float]:
        key = (zone, kind)
        if key not in self.cache:
            lo, hi = self.wanted[zone]
            first = lo.replace(minute=0, second=0, microsecond=0)
            self.cache[key] = {p.ts: p.value for p in hourly_series(self.session, zone, kind, first,
                                                                     hi + timedelta(hours=1))}
        return self.cache[key]


def _run_now_start(job: Job) -> datetime:
    """When the job would have started had it run now: at release, or at submission when released before it."""
    return max(job.release_at, job.created_at) if job.created_at is not None else job.release_at


def _same_work_run_now(job: Job, used: _Used, a: Assignment, home: Region, series: _Series,
                       to_reporting: Callable[[str], float]) -> tuple[float, float | None, float | None]:
    """(facility energy [kWh], cost [reporting currency], carbon [kg]) of the metered work run now in ``home``."""
    start = _run_now_start(job)
    end = start + timedelta(seconds=used.run_s)
    energy = used.work_kwh * (home.pue or 1.0)
    cost = priced(series.values(home.zone, SeriesKind.PRICE), start, end, energy)
    carbon = priced(series.values(home.zone, SeriesKind.CARBON_INTENSITY), start, end, energy)
    # No series for those hours: the run-now plan's price and intensity per kWh (for the planned duration).
    plan_kwh = a.run_now_energy_kwh
    if cost is not None:
        cost *= to_reporting(home.currency)
    elif a.run_now_cost is not None and plan_kwh:
        cost = energy * a.run_now_cost / plan_kwh * to_reporting(a.currency)
    if carbon is None and a.run_now_carbon_kg is not None and plan_kwh:
        carbon = energy * a.run_now_carbon_kg / plan_kwh
    return energy, cost, carbon


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
    by_code = {r.code: r for r in regions.values()}
    cluster_region = dict(session.execute(select(Cluster.id, Cluster.region_id)).all())
    series = _Series(session)
    settled: list[tuple[Job, Assignment, _Used, Region, Callable[[str], float]]] = []
    planned: list[tuple[Job, Assignment, Callable[[str], float]]] = []
    for job in jobs:
        a = assignments.get(job.id)
        if a is None:
            continue
        to_reporting = partial(rate, fx_rates, target=currency_of.get(job.tenant_id, configured_currency),
                               configured=configured_currency)
        job_runs = all_runs.get(job.id, [])
        counted = _counted_runs(job_runs)
        if counted and (_work_done(job_runs, a) or job.state in UNBILLED_UNLESS_METERED):
            used = _used(counted, a, regions, cluster_region, to_reporting)
            home = by_code.get(job.home_region or "") or used.region
            start = _run_now_start(job)
            series.want(home.zone, start, start + timedelta(seconds=used.run_s))
            settled.append((job, a, used, home, to_reporting))
        elif job.state not in UNBILLED_UNLESS_METERED:  # ended without metered energy: nothing was used
            planned.append((job, a, to_reporting))

    def entry(job: Job, a: Assignment, basis: str, figures: tuple[float, float, float, datetime, datetime],
              currency: str, run_now: dict[str, object]) -> Entry:
        energy, cost, carbon, start, end = figures
        run = runs.get(job.id)
        counted = _counted_runs(all_runs.get(job.id, []))
        return Entry(
            job_id=job.id, job_name=job.name, tenant=slugs.get(job.tenant_id, str(job.tenant_id)),
            state=job.state.value, basis=basis, region=a.region.code, hardware=a.hardware_type.code,
            gpu_count=job.gpu_count, start_at=start, end_at=end, runtime_job_id=run.runtime_job_id if run else None,
            energy_source=counted[-1].energy_source if basis != PLANNED and counted else None,
            planned_energy_kwh=a.energy_kwh,
            metered_energy_kwh=math.fsum(float(r.energy_kwh or 0.0) for r in counted) if basis != PLANNED else None,
            energy_kwh=energy, cost=cost, currency=currency, carbon_kg=carbon,
            carbon_market_kg=_market_carbon_kg(contracts, job.tenant_id, a.region_id, start, energy, carbon),
            **run_now,  # type: ignore[arg-type]
        )

    out: list[Entry] = []
    for job, a, used, home, conv in settled:
        energy, cost, carbon = _same_work_run_now(job, used, a, home, series, conv)
        start = _run_now_start(job)
        out.append(entry(job, a, used.basis, (used.energy_kwh, used.cost, used.carbon_kg, used.start, used.end),
                         currency_of.get(job.tenant_id, configured_currency), {
                             "run_now_energy_kwh": energy, "run_now_cost": cost, "run_now_carbon_kg": carbon,
                             "run_now_basis": METERED, "run_now_region": home.code, "run_now_start_at": start,
                             "run_now_end_at": start + timedelta(seconds=used.run_s)}))
    for job, a, conv_p in planned:
        out.append(entry(job, a, PLANNED, (a.energy_kwh, a.cost * conv_p(a.currency), a.carbon_kg, a.start_at,
                                           a.end_at), currency_of.get(job.tenant_id, configured_currency), {
            "run_now_energy_kwh": a.run_now_energy_kwh,
            "run_now_cost": None if a.run_now_cost is None else a.run_now_cost * conv_p(a.currency),
            "run_now_carbon_kg": a.run_now_carbon_kg, "run_now_basis": PLANNED}))
    order = {j.id: i for i, j in enumerate(jobs)}
    return sorted(out, key=lambda e: order[e.job_id])


def receipt(
    session: Session, principal: Principal, job_id: int, *, fx_rates: Mapping[str, float] | None = None,
    configured_currency: str = "EUR",
) -> tuple[Job, Entry | None, Run | None, str]:
    """A job's receipt: its entry (None before it is planned), its latest run and the tenant's reporting currency.

    Other tenants get 404; operator admins and read-only operators read every tenant's.
    """
    job = session.get(Job, job_id) if 0 < job_id < 2**31 else None  # ids are 32-bit in the database
    if job is None or not principal.can_see(job.tenant_id):
        raise NotFound(f"job {job_id}")
    # An operator reads a tenant's receipt in the tenant's own currency, as the tenant does.
    currency = tenant_currency(session.get(Tenant, job.tenant_id), configured_currency)
    entries = build_entries(session, [job], currency_of={job.tenant_id: currency}, fx_rates=fx_rates,
                            configured_currency=configured_currency)
    return job, (entries[0] if entries else None), _latest_runs(session, [job.id]).get(job.id), currency


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

    A tenant sees only its own jobs. An operator admin or read-only operator sees every tenant ("all") or the one
    named by ``tenant``.
    """
    label, start, end = month_range(month, now)
    fleet_wide = principal.sees_fleet
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
    rows = tuple(
        sum_row(label, t, r, currency, groups[(t, r)], (None, r) in covered or (t, r) in covered)
        for t, r in sorted(groups)
    )
    total = sum_row(label, scope, "all", currency, entries)
    origin = market_provenance(session, start, end)
    return MonthlyReport(label, start, end, currency, scope, rows, total, now or utcnow(), origin.kind, origin.notice)
