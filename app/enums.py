"""Enumerations shared by the database, the API and the services."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"
    MEMBER = "member"
    READONLY = "readonly"


class WorkloadClass(StrEnum):
    TRAINING = "training"
    FINE_TUNING = "fine_tuning"
    RENDERING = "rendering"
    BATCH_INFERENCE = "batch_inference"


class JobState(StrEnum):
    PENDING = "pending"  # accepted, not yet in a plan
    PLANNED = "planned"
    DISPATCHING = "dispatching"
    SUBMITTED = "submitted"
    RUNNING = "running"
    PAUSED = "paused"  # an interruptible job between two chunks of its assignment; resumes at jobs.resume_at
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"
    UNSCHEDULABLE = "unschedulable"


TERMINAL_JOB_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST, JobState.UNSCHEDULABLE}
)


class RunState(StrEnum):
    DISPATCHING = "dispatching"
    SUBMITTED = "submitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


TERMINAL_RUN_STATES = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.LOST})
ACTIVE_RUN_STATES = (RunState.DISPATCHING, RunState.SUBMITTED, RunState.RUNNING)


class SeriesKind(StrEnum):
    PRICE = "price"  # day-ahead price [currency/MWh]
    CARBON_INTENSITY = "carbon_intensity"  # [gCO2eq/kWh]
    RENEWABLE_SHARE = "renewable_share"  # [fraction 0..1]
    LOAD = "load"  # actual load [MW]
    LOAD_FORECAST = "load_forecast"  # day-ahead load forecast [MW]
    WIND_SOLAR_FORECAST = "wind_solar_forecast"  # day-ahead wind + solar forecast [MW]
    GENERATION_FORECAST = "generation_forecast"  # day-ahead aggregated generation forecast (ENTSO-E 14.1.C) [MW]


SERIES_UNITS: dict[SeriesKind, str] = {
    SeriesKind.PRICE: "EUR/MWh",
    SeriesKind.CARBON_INTENSITY: "gCO2eq/kWh",
    SeriesKind.RENEWABLE_SHARE: "fraction",
    SeriesKind.LOAD: "MW",
    SeriesKind.LOAD_FORECAST: "MW",
    SeriesKind.WIND_SOLAR_FORECAST: "MW",
    SeriesKind.GENERATION_FORECAST: "MW",
}


class PlanStatus(StrEnum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    EMPTY = "empty"
    FAILED = "failed"


class PlanRunState(StrEnum):
    """Where an asked-for plan run is: waiting for a worker, solving, or done one way or the other."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ForecastRunStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ProfileSource(StrEnum):
    ESTIMATE = "estimate"
    MEASURED = "measured"
