"""Monthly report exports: CSV (one row per tenant and region, then the total) and a PDF with charts.

The PDF is drawn with matplotlib's object API (``Figure`` + ``FigureCanvasPdf``), never pyplot, so that it is safe
in a threaded web server and needs no display.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict

from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

from app.services.ledger import MonthlyReport, ReportRow

# Settled (metered or estimated) work first, savings claimed on it alone; then planned work and its expected saving.
CSV_COLUMNS = (
    "month", "tenant", "region", "currency", "jobs", "settled_jobs", "estimated_jobs", "energy_kwh", "cost",
    "carbon_kg", "carbon_market_kg", "run_now_cost", "run_now_carbon_kg", "saving_cost", "saving_carbon_kg",
    "saving_pct", "planned_jobs", "planned_energy_kwh", "planned_cost", "planned_carbon_kg", "expected_run_now_cost",
    "expected_saving_cost", "expected_saving_carbon_kg", "expected_saving_pct",
)
#: The last column: real, replayed or synthetic market data behind the figures (app.services.provenance).
PROVENANCE_COLUMN = "market_data"


def _fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def row_values(row: ReportRow) -> list[object]:
    return [getattr(row, c) for c in CSV_COLUMNS]


def to_csv(report: MonthlyReport) -> str:
    """The report as CSV text: a header, one line per (tenant, region), and a final ``all`` line."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow((*CSV_COLUMNS, PROVENANCE_COLUMN))
    for row in (*report.rows, report.total):
        writer.writerow([*(_fmt(v) for v in row_values(row)), report.market_data])
    return buf.getvalue()


def _by_region(report: MonthlyReport) -> dict[str, list[ReportRow]]:
    out: dict[str, list[ReportRow]] = defaultdict(list)
    for row in report.rows:
        out[row.region].append(row)
    return dict(sorted(out.items()))


def _summary_page(report: MonthlyReport) -> Figure:
    fig = Figure(figsize=(11.69, 8.27))  # A4 landscape [in]
    t = report.total
    fig.text(0.04, 0.94, f"Gridshift energy, cost and carbon report - {report.month}", fontsize=18, weight="bold")
    pct = f" ({t.saving_pct:.1f} %)" if t.saving_pct is not None else ""
    market = f"{t.carbon_market_kg:,.1f} kg" if t.carbon_market_kg is not None else "no contracts"
    expected_pct = f" ({t.expected_saving_pct:.1f} %)" if t.expected_saving_pct is not None else ""
    lines = [
        f"Tenant: {report.tenant}    Period: {report.start:%Y-%m-%d} to {report.end:%Y-%m-%d} (UTC, end exclusive)",
        f"Settled (ran; {t.settled_jobs} jobs, {t.estimated_jobs} of them estimated from profile): "
        f"{t.energy_kwh:,.1f} kWh, {t.cost:,.2f} {report.currency}, CO2 {t.carbon_kg:,.1f} kg (market-based: {market})",
        f"    against run-now {t.run_now_cost:,.2f} {report.currency}: saving {t.saving_cost:,.2f} {report.currency}"
        f"{pct}, {t.saving_carbon_kg:,.1f} kg CO2",
        f"Planned (not run yet; {t.planned_jobs} jobs): {t.planned_energy_kwh:,.1f} kWh, {t.planned_cost:,.2f} "
        f"{report.currency}, CO2 {t.planned_carbon_kg:,.1f} kg",
        f"    expected saving {t.expected_saving_cost:,.2f} {report.currency}{expected_pct}, "
        f"{t.expected_saving_carbon_kg:,.1f} kg CO2 (not claimed until the work has run)",
        f"Generated {report.generated_at:%Y-%m-%d %H:%M} UTC",
    ]
    if report.data_notice:
        fig.text(0.04, 0.90, report.data_notice[:160], fontsize=10, color="#b00020", weight="bold")
    for i, line in enumerate(lines):
        fig.text(0.04, 0.88 - 0.035 * i, line, fontsize=10)
    regions = _by_region(report)
    names = list(regions) or ["(none)"]
    cost = [sum(r.cost for r in regions.get(n, [])) for n in names]
    now_cost = [sum(r.run_now_cost for r in regions.get(n, [])) for n in names]
    planned = [sum(r.planned_cost for r in regions.get(n, [])) for n in names]
    carbon = [sum(r.carbon_kg for r in regions.get(n, [])) for n in names]
    now_carbon = [sum(r.run_now_carbon_kg for r in regions.get(n, [])) for n in names]
    xs = range(len(names))
    w = 0.38
    ax1 = fig.add_axes((0.06, 0.1, 0.4, 0.5))
    ax1.bar([x - w / 2 for x in xs], cost, w, label="settled", color="#2a7f62")
    ax1.bar([x - w / 2 for x in xs], planned, w, bottom=cost, label="planned (expected)", color="#9fd3c0",
            hatch="//")
    ax1.bar([x + w / 2 for x in xs], now_cost, w, label="run now (settled work)", color="#b0b0b0")
    ax1.set_xticks(list(xs), names, rotation=30, ha="right")
    ax1.set_ylabel(f"cost [{report.currency}]")
    ax1.set_title("Cost per region")
    ax1.legend()
    ax2 = fig.add_axes((0.56, 0.1, 0.4, 0.5))
    ax2.bar([x - w / 2 for x in xs], carbon, w, label="settled (location)", color="#3b6ea5")
    ax2.bar([x + w / 2 for x in xs], now_carbon, w, label="run now (settled work)", color="#b0b0b0")
    ax2.set_xticks(list(xs), names, rotation=30, ha="right")
    ax2.set_ylabel("CO2 [kg]")
    ax2.set_title("Emissions per region")
    ax2.legend()
    return fig


def _table_pages(report: MonthlyReport, per_page: int = 28) -> list[Figure]:
    header = ["tenant", "region", "settled jobs", "kWh", f"cost {report.currency}", "CO2 kg", "CO2 mkt kg",
              "run-now cost", "saving", "saving CO2 kg", "planned jobs", "planned kWh", "planned cost",
              "expected saving"]
    rows = [
        [r.tenant, r.region, str(r.settled_jobs), f"{r.energy_kwh:,.1f}", f"{r.cost:,.2f}", f"{r.carbon_kg:,.1f}",
         "-" if r.carbon_market_kg is None else f"{r.carbon_market_kg:,.1f}", f"{r.run_now_cost:,.2f}",
         f"{r.saving_cost:,.2f}", f"{r.saving_carbon_kg:,.1f}", str(r.planned_jobs), f"{r.planned_energy_kwh:,.1f}",
         f"{r.planned_cost:,.2f}", f"{r.expected_saving_cost:,.2f}"]
        for r in (*report.rows, report.total)
    ]
    pages = []
    for i in range(0, max(len(rows), 1), per_page):
        fig = Figure(figsize=(11.69, 8.27))
        fig.text(0.04, 0.94, f"Per tenant and region - {report.month}", fontsize=14, weight="bold")
        ax = fig.add_axes((0.04, 0.05, 0.92, 0.85))
        ax.axis("off")
        chunk = rows[i : i + per_page] or [["-"] * len(header)]
        table = ax.table(cellText=chunk, colLabels=header, loc="upper center", cellLoc="right")
        table.auto_set_font_size(False)
        table.set_fontsize(7)
        table.scale(1, 1.3)
        pages.append(fig)
    return pages


def to_pdf(report: MonthlyReport) -> bytes:
    """The report as a PDF: a summary page with charts, then the table."""
    buf = io.BytesIO()
    with PdfPages(buf, metadata={"Title": f"Gridshift report {report.month}", "Creator": "Gridshift"}) as pdf:
        for fig in (_summary_page(report), *_table_pages(report)):
            pdf.savefig(fig)
    return buf.getvalue()
