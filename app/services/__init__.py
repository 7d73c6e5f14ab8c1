"""Use cases. Each takes a SQLAlchemy ``Session`` and plain values; views and tasks call these, never each other.

The use-case modules (planning, overview, reports, plan_history, dispatch, jobs, ...) do not import each other: what
several of them read the same way sits on a floor below them (assignments, series, job_values, job_states, pages).
import-linter checks both rules; docs/architecture.md maps where each concept lives.
"""
