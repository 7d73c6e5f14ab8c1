"""The floor's answers about an assignment: when it runs, what it draws, which slots it holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from app.services.assignments import assignment_power_kw, per_slot_use, running_intervals, slots_of

T0 = datetime(2030, 6, 1, tzinfo=UTC)
H = timedelta(hours=1)


def _assignment(chunks, energy_kwh, gpus=4):  # type: ignore[no-untyped-def]
    start, end = (chunks[0][0], chunks[-1][1]) if chunks else (T0, T0 + 3 * H)
    return SimpleNamespace(start_at=start, end_at=end, energy_kwh=energy_kwh,
                           chunks=[[s.isoformat(), e.isoformat()] for s, e in chunks] if chunks else None,
                           region=SimpleNamespace(code="de"), hardware_type=SimpleNamespace(code="h100"),
                           job=SimpleNamespace(gpu_count=gpus))


def test_a_chunked_assignment_draws_its_energy_over_its_running_hours_only():
    a = _assignment([(T0, T0 + H), (T0 + 2 * H, T0 + 3 * H)], energy_kwh=20.0)
    assert running_intervals(a) == [(T0, T0 + H), (T0 + 2 * H, T0 + 3 * H)]
    assert assignment_power_kw(a) == 10.0  # 20 kWh over 2 running hours, not over the 3 hours it spans
    gpus, power = per_slot_use([(a, running_intervals(a))], start=T0, slot_minutes=60, n_slots=4)
    assert power == {"de": [10.0, 0.0, 10.0, 0.0]} and gpus == {("de", "h100"): [4, 0, 4, 0]}


def test_an_interval_holds_every_slot_it_touches_and_none_outside_the_horizon():
    assert list(slots_of(T0 + timedelta(minutes=10), T0 + timedelta(minutes=50), start=T0, slot_minutes=15,
                         n_slots=8)) == [0, 1, 2, 3]
    assert list(slots_of(T0 - H, T0 + 30 * H, start=T0, slot_minutes=60, n_slots=24)) == list(range(24))
    assert assignment_power_kw(_assignment([(T0, T0)], energy_kwh=1.0)) == 0.0  # no running time draws nothing
