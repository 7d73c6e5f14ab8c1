"""Hypothesis property tests: the market CSV importer and the independent plan checker.

CSV importer: whatever bytes arrive, the importer either returns points or raises ValidationFailed (never another
exception, which the API would turn into a 500); well-formed files round-trip exactly; one bad line fails the
whole file and is named by its line number.

Plan checker: plans from the solvers pass it on random small problems, and every single corruption of a valid
plan (a job dropped or doubled, a figure changed, a run moved before release or stretched, an unknown region) is
caught.
"""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from app.enums import SeriesKind
from app.errors import ValidationFailed
from app.services import market
from optimizer import Chunk, HardwareType, Job, Problem, Region, SolveParams, check_plan, get_solver

FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)

# --- CSV importer ----------------------------------------------------------------------------------------

offsets = st.sampled_from(
    [timedelta(0), timedelta(hours=1), timedelta(hours=-5), timedelta(hours=5, minutes=30)]
)
instants = st.datetimes(min_value=datetime(2015, 1, 1), max_value=datetime(2035, 1, 1)).map(
    lambda d: d.replace(microsecond=0, tzinfo=UTC)
)
values = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)
zones = st.from_regex(r"[A-Z]{2}(_[A-Z0-9]{1,3})?", fullmatch=True)
points = st.lists(
    st.tuples(zones, st.sampled_from(list(SeriesKind)), instants, offsets, values), min_size=1, max_size=30
)


def _long_csv(rows: list[tuple[str, SeriesKind, datetime, timedelta, float]]) -> bytes:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["zone", "kind", "timestamp", "value"])
    for zone, kind, ts, off, value in rows:
        w.writerow([zone, kind.value, ts.astimezone(timezone(off)).isoformat(), repr(value)])
    return out.getvalue().encode()


@FAST
@given(points, st.booleans())
def test_long_csv_round_trips_exactly(rows, gzipped):
    data = _long_csv(rows)
    if gzipped:
        data = gzip.compress(data)
    parsed = market.parse_upload(data, zone=None, source="prop")
    assert [(p.zone, p.kind, p.ts, p.value) for p in parsed] == [(z, k, ts, v) for z, k, ts, _o, v in rows]
    assert all(p.ts.utcoffset() is not None for p in parsed)


BAD_CELLS = {
    "timestamp": ["2030-01-01T00:00:00", "yesterday", "", "2030-13-01T00:00:00Z"],
    "value": ["", "abc", "inf", "-inf", "1e999"],
    "kind": ["price!", "", "PRICE "],
    "zone": [""],
}


@FAST
@given(points, st.data())
def test_one_bad_line_fails_the_file_and_is_named(rows, data):
    lines = _long_csv(rows).decode().splitlines()
    index = data.draw(st.integers(1, len(lines) - 1), label="bad line index")
    column = data.draw(st.sampled_from(sorted(BAD_CELLS)), label="column")
    cell = data.draw(st.sampled_from(BAD_CELLS[column]), label="bad cell")
    fields = next(csv.reader([lines[index]]))
    fields[["zone", "kind", "timestamp", "value"].index(column)] = cell
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(fields)
    lines[index] = buf.getvalue()
    with pytest.raises(ValidationFailed) as info:
        market.parse_upload("\n".join(lines).encode(), zone=None, source="prop")
    assert [e.field for e in info.value.errors] == [f"line {index + 1}"], info.value.errors


@FAST
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), values), st.one_of(st.none(), values), st.one_of(st.none(), st.floats(0, 1))
        ),
        min_size=1,
        max_size=48,
    )
)
def test_harmonized_rows_give_one_point_per_filled_cell(cells):
    start = datetime(2023, 1, 1, tzinfo=UTC)
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["timestamp_utc", "price_eur_mwh", "load_mw", "renewable_share"])
    expected = 0
    for i, (price, load, share) in enumerate(cells):
        w.writerow(
            [
                (start + timedelta(hours=i)).isoformat(),
                *("" if v is None else repr(v) for v in (price, load, share)),
            ]
        )
        expected += (price is not None) + (load is not None and load != 0) + (share is not None)
    parsed = market.parse_upload(out.getvalue().encode(), zone="DE_LU", source="prop")
    assert len(parsed) == expected
    assert {p.zone for p in parsed} <= {"DE_LU"}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.one_of(
        st.binary(max_size=400).filter(lambda b: b[:2] != b"\x1f\x8b"),  # gzip: see the next test
        st.text(max_size=400).map(str.encode),
        st.lists(st.text(alphabet=',;"\n\r\x00Z:-T0123456789.e+', max_size=30), max_size=10).map(
            lambda parts: ("zone,kind,timestamp,value\n" + "\n".join(parts)).encode()
        ),
        st.lists(st.text(alphabet=',"\n\x00Z:-T0123456789.', max_size=30), max_size=10).map(
            lambda parts: ("timestamp_utc,price_eur_mwh\n" + "\n".join(parts)).encode()
        ),
    )
)
def test_any_upload_is_parsed_or_refused_with_a_validation_error(data):
    try:
        market.parse_upload(data, zone="DE", source="fuzz")
    except ValidationFailed as exc:
        assert exc.errors and all(e.field for e in exc.errors)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(st.binary(max_size=200).map(lambda b: b"\x1f\x8b" + b))
def test_a_broken_gzip_upload_is_a_validation_error(data):
    try:
        market.parse_upload(data, zone="DE", source="fuzz")
    except ValidationFailed as exc:
        assert exc.errors[0].field == "file"


# --- plan checker ----------------------------------------------------------------------------------------

H100 = HardwareType("H100", memory_gb=80, power_kw_per_gpu=0.7, relative_throughput=1.0)


@st.composite
def problems(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(4, 10), label="slots")
    regions = []
    for name in draw(st.sampled_from([("de",), ("de", "fi")]), label="regions"):
        prices = draw(st.lists(st.floats(-50, 300), min_size=n, max_size=n), label=f"{name} prices")
        carbon = draw(st.lists(st.floats(0, 800), min_size=n, max_size=n), label=f"{name} carbon")
        regions.append(
            Region(
                name=name,
                price_per_mwh=tuple(prices),
                carbon_g_per_kwh=tuple(carbon),
                power_budget_kw=(draw(st.sampled_from([3.0, 100.0])),) * n,
                inventory={"H100": draw(st.integers(1, 8))},
                pue=draw(st.sampled_from([1.0, 1.2])),
            )
        )
    jobs = []
    for i in range(draw(st.integers(1, 5), label="jobs")):
        dur = draw(st.integers(1, 3))
        rel = draw(st.integers(0, n - dur))
        dl = draw(st.integers(rel + dur, n))
        jobs.append(Job(f"j{i}", draw(st.integers(1, 4)), {"H100": dur}, rel, dl))
    return Problem(datetime(2030, 1, 1, tzinfo=UTC), 60, n, tuple(regions), (H100,), tuple(jobs))


PARAMS = SolveParams(time_limit_s=2.0, num_workers=1, random_seed=7)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(problems(), st.sampled_from(["greedy", "best_window", "run_now", "gridshift"]))
def test_solver_plans_pass_the_checker(problem, solver):
    plan = get_solver(solver)(problem, PARAMS)
    report = check_plan(
        problem, plan, allow_late=solver in ("run_now", "best_window")
    )  # baselines may queue late
    assert report.ok, (solver, report.violations)


MUTATIONS = ["drop", "double", "energy", "before_release", "stretch", "unknown_region"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(problems(), st.sampled_from(MUTATIONS))
def test_every_corruption_of_a_valid_plan_is_caught(problem, mutation):
    plan = get_solver("greedy")(problem, PARAMS)
    assume(plan.assignments and check_plan(problem, plan).ok)
    first, rest = plan.assignments[0], plan.assignments[1:]
    job = next(j for j in problem.jobs if j.job_id == first.job_id)
    if mutation == "drop":
        bad = replace(plan, assignments=rest)
    elif mutation == "double":
        bad = replace(plan, assignments=(first, first, *rest))
    elif mutation == "energy":
        bad = replace(plan, assignments=(replace(first, energy_kwh=first.energy_kwh * 1.1 + 1.0), *rest))
    elif mutation == "before_release":
        assume(job.release_slot > 0)
        shift = first.start_slot - job.release_slot + 1
        chunks = tuple(Chunk(c.start_slot - shift, c.end_slot - shift) for c in first.chunks)
        bad = replace(plan, assignments=(replace(first, chunks=chunks), *rest))
    elif mutation == "stretch":
        last = first.chunks[-1]
        chunks = (*first.chunks[:-1], Chunk(last.start_slot, last.end_slot + 1))
        bad = replace(plan, assignments=(replace(first, chunks=chunks), *rest))
    else:
        bad = replace(plan, assignments=(replace(first, region="atlantis"), *rest))
    assert not check_plan(problem, bad).ok, mutation
