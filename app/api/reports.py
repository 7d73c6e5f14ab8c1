"""Reports: a job's receipt, and per month, tenant and region energy, cost, CO2 and savings (JSON, CSV, PDF)."""

from __future__ import annotations

from typing import Any

from flask import Response
from flask_smorest import Blueprint
from marshmallow import Schema, fields, validate

from app import extensions
from app.api import principal
from app.api.schemas import CODE
from app.costs import costly
from app.services import report_export, reports

blp = Blueprint("reports", __name__, url_prefix="/api/v1", description="Receipts and monthly reports")


class ReportQuery(Schema):
    month = fields.String(validate=validate.Regexp(r"^\d{4}-\d{2}$", error="expected YYYY-MM"),
                          metadata={"description": "UTC month, e.g. 2030-01; default: this month"})
    region = fields.String(validate=CODE)
    tenant = fields.String(validate=validate.Length(1, 63),
                           metadata={"description": "operator admins only: one tenant instead of all"})


def _settled(text: str) -> dict[str, str]:
    return {"description": f"{text}; settled work only (it ran and its energy was read)"}


def _planned(text: str) -> dict[str, str]:
    return {"description": f"{text}; planned work that has not run yet (expected, not claimed)"}


class ReportRowOut(Schema):
    month = fields.String()
    tenant = fields.String()
    region = fields.String()
    currency = fields.String()
    jobs = fields.Integer(metadata={"description": "settled and planned"})
    settled_jobs = fields.Integer(metadata=_settled("jobs"))
    estimated_jobs = fields.Integer(metadata={"description": "settled jobs whose energy was estimated from a profile"})
    planned_jobs = fields.Integer(metadata=_planned("jobs"))
    energy_kwh = fields.Float(metadata=_settled("facility energy [kWh]"))
    cost = fields.Float(metadata=_settled("cost"))
    carbon_kg = fields.Float(metadata=_settled("location-based [kgCO2eq]"))
    carbon_market_kg = fields.Float(allow_none=True, metadata=_settled("market-based, where contracts exist"))
    run_now_cost = fields.Float(metadata=_settled("the same work run now"))
    run_now_carbon_kg = fields.Float(metadata=_settled("the same work run now"))
    saving_cost = fields.Float(metadata=_settled("run-now cost minus cost"))
    saving_carbon_kg = fields.Float(metadata=_settled("run-now CO2 minus CO2"))
    saving_pct = fields.Float(allow_none=True)
    planned_energy_kwh = fields.Float(metadata=_planned("facility energy [kWh]"))
    planned_cost = fields.Float(metadata=_planned("cost"))
    planned_carbon_kg = fields.Float(metadata=_planned("location-based [kgCO2eq]"))
    expected_run_now_cost = fields.Float(metadata=_planned("run-now cost"))
    expected_saving_cost = fields.Float(metadata=_planned("expected saving"))
    expected_saving_carbon_kg = fields.Float(metadata=_planned("expected CO2 saving"))
    expected_saving_pct = fields.Float(allow_none=True)


class ReportOut(Schema):
    month = fields.String()
    start = fields.DateTime(format="iso")
    end = fields.DateTime(format="iso")
    currency = fields.String()
    tenant = fields.String()
    rows = fields.List(fields.Nested(ReportRowOut))
    total = fields.Nested(ReportRowOut)
    generated_at = fields.DateTime(format="iso")
    market_data = fields.String(metadata={"description": "real, replayed, synthetic or mixed market data"})
    data_notice = fields.String(allow_none=True, metadata={
        "description": "what is not live market data about the month's series (replayed or synthetic); null if real"})


class ReceiptFiguresOut(Schema):
    energy_kwh = fields.Float(allow_none=True)
    cost = fields.Float(allow_none=True)
    carbon_kg = fields.Float(allow_none=True)


class ReceiptOut(Schema):
    job_id = fields.Integer()
    job_name = fields.String()
    state = fields.String()
    basis = fields.String(allow_none=True, metadata={
        "description": "metered, estimated (the runtime estimated the energy from a profile), planned, or null "
                       "before planning"})
    label = fields.String(allow_none=True, metadata={
        "description": "what the figures are, in words: metered, estimated from profile, or planned"})
    settled = fields.Boolean(metadata={"description": "the work ran and its energy was read: savings are claimed"})
    region = fields.String(allow_none=True)
    hardware = fields.String(allow_none=True)
    gpu_count = fields.Integer()
    start_at = fields.DateTime(format="iso", allow_none=True)
    end_at = fields.DateTime(format="iso", allow_none=True)
    runtime_job_id = fields.String(allow_none=True)
    run_state = fields.String(allow_none=True)
    energy_source = fields.String(allow_none=True)
    planned_energy_kwh = fields.Float(allow_none=True, metadata={"description": "facility energy of the plan [kWh]"})
    metered_energy_kwh = fields.Float(allow_none=True, metadata={"description": "metered IT (GPU) energy [kWh]"})
    currency = fields.String()
    actual = fields.Nested(ReceiptFiguresOut,
                           metadata={"description": "facility figures: metered x PUE when the run finished, else planned"})
    carbon_market_kg = fields.Float(allow_none=True)
    run_now = fields.Nested(ReceiptFiguresOut, metadata={
        "description": "the same work started at release in the home region: the metered energy over the metered "
                       "run time once it ran, the planned duration before"})
    run_now_basis = fields.String(allow_none=True, metadata={"description": "metered or planned work"})
    run_now_region = fields.String(allow_none=True)
    run_now_start_at = fields.DateTime(format="iso", allow_none=True)
    run_now_end_at = fields.DateTime(format="iso", allow_none=True)
    saving_cost = fields.Float(allow_none=True, metadata={"description": "claimed once settled, else expected"})
    saving_carbon_kg = fields.Float(allow_none=True)


def _report(q: dict[str, Any]) -> reports.MonthlyReport:
    return reports.monthly_report(
        extensions.db_session(), principal(), q.get("month"), region=q.get("region"), tenant=q.get("tenant"),
        fx_rates=extensions.settings().exchange_rates, configured_currency=extensions.settings().reporting_currency,
    )


@blp.route("/reports/monthly")
@costly("report", cached=True)
@blp.arguments(ReportQuery, location="query")
@blp.response(200, ReportOut)
def monthly(q: dict[str, Any]) -> Any:
    """Per tenant and region: energy, cost, location- and market-based CO2, savings against run-now.

    A tenant sees its own jobs; an operator admin sees every tenant.
    """
    return _report(q)


@blp.route("/reports/monthly.csv")
@costly("report", cached=True)
@blp.arguments(ReportQuery, location="query")
@blp.response(200, content_type="text/csv")
def monthly_csv(q: dict[str, Any]) -> Response:
    """The monthly report as CSV."""
    report = _report(q)
    return Response(report_export.to_csv(report), mimetype="text/csv", headers={
        "Content-Disposition": f'attachment; filename="gridshift-{report.tenant}-{report.month}.csv"'})


@blp.route("/reports/monthly.pdf")
@costly("report.pdf", cached=True)
@blp.arguments(ReportQuery, location="query")
@blp.response(200, content_type="application/pdf")
def monthly_pdf(q: dict[str, Any]) -> Response:
    """The monthly report as a PDF with charts."""
    report = _report(q)
    return Response(report_export.to_pdf(report), mimetype="application/pdf", headers={
        "Content-Disposition": f'attachment; filename="gridshift-{report.tenant}-{report.month}.pdf"'})


@blp.route("/jobs/<int:job_id>/receipt")
@blp.response(200, ReceiptOut)
def receipt(job_id: int) -> Any:
    """A job's energy, cost and CO2 (metered when its run finished, else planned) and its saving against run-now."""
    settings = extensions.settings()
    job, entry, run, currency = reports.receipt(extensions.db_session(), principal(), job_id,
                                                fx_rates=settings.exchange_rates,
                                                configured_currency=settings.reporting_currency)
    body: dict[str, Any] = {
        "job_id": job.id, "job_name": job.name, "state": job.state.value, "gpu_count": job.gpu_count,
        "runtime_job_id": run.runtime_job_id if run else None, "run_state": run.state.value if run else None,
        "basis": None, "label": None, "settled": False, "currency": currency, "actual": {}, "run_now": {},
    }
    if entry is not None:
        body.update(
            basis=entry.basis, label=entry.label, settled=entry.settled, region=entry.region, hardware=entry.hardware, start_at=entry.start_at,
            end_at=entry.end_at, energy_source=entry.energy_source, planned_energy_kwh=entry.planned_energy_kwh,
            metered_energy_kwh=entry.metered_energy_kwh, currency=entry.currency,
            actual={"energy_kwh": entry.energy_kwh, "cost": entry.cost, "carbon_kg": entry.carbon_kg},
            carbon_market_kg=entry.carbon_market_kg,
            run_now={"energy_kwh": entry.run_now_energy_kwh, "cost": entry.run_now_cost,
                     "carbon_kg": entry.run_now_carbon_kg},
            run_now_basis=entry.run_now_basis, run_now_region=entry.run_now_region,
            run_now_start_at=entry.run_now_start_at, run_now_end_at=entry.run_now_end_at,
            saving_cost=entry.saving_cost, saving_carbon_kg=entry.saving_carbon_kg,
        )
    return body
