"""The ledger's shapes and sums: a job's entry, the per month, tenant and region rows, months and currencies.

An entry is **settled** once the work ran and its energy was read (``basis`` ``metered``, or ``estimated`` when
the runtime could only estimate it from the hardware's power profile), else **planned**. Rows keep the two apart:
``energy_kwh``, ``cost``, ``carbon_kg`` and the savings are settled work only; ``planned_*`` and ``expected_*``
are the work still to run and what it is expected to save. A saving is claimed only on settled work.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from app.db import utcnow
from app.errors import FieldError, ValidationFailed
from app.models import Tenant

METERED, ESTIMATED, PLANNED = "metered", "estimated", "planned"
SETTLED = frozenset({METERED, ESTIMATED})
# what a receipt says its figures are
LABELS = {METERED: "metered", ESTIMATED: "estimated from profile", PLANNED: "planned"}
TENANT_CURRENCY_DEFAULT = "EUR"  # tenants.reporting_currency of a tenant with no currency of its own


@dataclass(frozen=True, slots=True)
class Entry:
    """One job's accounting: what it used (or is planned to use) and its run-now counterfactual of the same work."""

    job_id: int
    job_name: str
    tenant: str
    state: str
    basis: str  # metered | estimated | planned
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
    run_now_basis: str | None = None  # metered (the same metered work) | planned (the planned duration)
    run_now_region: str | None = None
    run_now_start_at: datetime | None = None
    run_now_end_at: datetime | None = None

    @property
    def settled(self) -> bool:
        """The work ran and its energy was read (metered, or estimated by the runtime)."""
        return self.basis in SETTLED

    @property
    def label(self) -> str:
        return LABELS[self.basis]

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
    """Sums over the entries of one month, tenant and region ("all" in the totals row).

    ``energy_kwh`` .. ``saving_carbon_kg`` are settled work only; ``planned_*`` and ``expected_*`` the planned rest.
    """

    month: str
    tenant: str
    region: str
    currency: str
    jobs: int
    settled_jobs: int
    estimated_jobs: int  # settled jobs whose energy the runtime estimated from a profile
    planned_jobs: int
    energy_kwh: float
    cost: float
    carbon_kg: float
    carbon_market_kg: float | None
    run_now_cost: float
    run_now_carbon_kg: float
    saving_cost: float
    saving_carbon_kg: float
    planned_energy_kwh: float
    planned_cost: float
    planned_carbon_kg: float
    expected_run_now_cost: float
    expected_saving_cost: float
    expected_saving_carbon_kg: float

    @property
    def saving_pct(self) -> float | None:
        """Settled cost saving against run-now [%] of the settled run-now cost."""
        return 100.0 * self.saving_cost / self.run_now_cost if self.run_now_cost > 0 else None

    @property
    def expected_saving_pct(self) -> float | None:
        """Expected cost saving of the planned work [%] of its run-now cost."""
        return 100.0 * self.expected_saving_cost / self.expected_run_now_cost if self.expected_run_now_cost > 0 else None


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
    market_data: str = "real"  # real, replayed, synthetic or mixed (app.services.provenance)
    data_notice: str | None = None  # one sentence saying so, when the month's market data is not real


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


def rate(fx_rates: Mapping[str, float], currency: str, target: str, configured: str) -> float:
    """Units of ``target`` per unit of ``currency``.

    ``fx_rates`` gives units of the configured reporting currency per unit of another currency (``GBP=1.17``), so a
    tenant reporting in a currency of its own goes through the configured one.
    """
    if currency == target:
        return 1.0

    def per_unit(cur: str) -> float:  # units of the configured currency per unit of ``cur``
        if cur == configured:
            return 1.0
        fx = fx_rates.get(cur)
        if fx is None:
            raise ValidationFailed(
                f"no exchange rate from {currency} to the reporting currency {target}",
                [FieldError("currency", f"GRIDSHIFT_FX_RATES has no rate for {cur} ({cur}=<{configured} per {cur}>)")],
            )
        return float(fx)

    return per_unit(currency) / per_unit(target)


def sum_row(month: str, tenant: str, region: str, currency: str, entries: Sequence[Entry],
            contract_covers: bool = False) -> ReportRow:
    """Sums of ``entries``, settled and planned apart. ``contract_covers``: a contract of this row's tenant or of
    the fleet covers its region (market-based CO2)."""
    settled = [e for e in entries if e.settled]
    planned = [e for e in entries if not e.settled]
    market: float | None = None
    if any(e.carbon_market_kg is not None for e in settled) or contract_covers:
        market = math.fsum(e.carbon_market_kg if e.carbon_market_kg is not None else e.carbon_kg for e in settled)

    def total(es: Sequence[Entry], attr: str) -> float:
        return math.fsum(v for e in es if (v := getattr(e, attr)) is not None)

    return ReportRow(
        month=month, tenant=tenant, region=region, currency=currency, jobs=len(entries),
        settled_jobs=len(settled), estimated_jobs=sum(e.basis == ESTIMATED for e in settled), planned_jobs=len(planned),
        energy_kwh=total(settled, "energy_kwh"), cost=total(settled, "cost"), carbon_kg=total(settled, "carbon_kg"),
        carbon_market_kg=market,
        run_now_cost=total(settled, "run_now_cost"), run_now_carbon_kg=total(settled, "run_now_carbon_kg"),
        saving_cost=total(settled, "saving_cost"), saving_carbon_kg=total(settled, "saving_carbon_kg"),
        planned_energy_kwh=total(planned, "energy_kwh"), planned_cost=total(planned, "cost"),
        planned_carbon_kg=total(planned, "carbon_kg"), expected_run_now_cost=total(planned, "run_now_cost"),
        expected_saving_cost=total(planned, "saving_cost"),
        expected_saving_carbon_kg=total(planned, "saving_carbon_kg"),
    )
