"""Schemathesis against /api/v1/openapi.json: generated requests for every operation, no 5xx, responses match.

The generator runs as the operator's admin (the token that reaches the most code) on a small fleet with two
tenants' data in it. By default the deterministic phases run: the schema's examples and its coverage phase (every
boundary and type-violating value the schema implies; ~1,900 cases, ~35 s). Add random fuzzing with
``GRIDSHIFT_TEST_FUZZ_PHASES=examples,coverage,fuzzing`` and ``GRIDSHIFT_TEST_FUZZ_EXAMPLES`` per operation.

Every built-in check runs except two about the API's validation policy rather than its contract:
``positive_data_acceptance`` (the API rightly refuses some schema-valid requests on business rules no JSON schema
expresses: a deadline too short for the work, a cursor it did not issue, an unknown region) and
``negative_data_rejection`` (list and overview queries deliberately ignore unknown query parameters).
The last test checks that at least 1,000 cases ran when the whole module ran.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.core.result import Ok

from app import create_app
from app.config import Settings
from tests.security.conftest import World, _tokens, add_alpha_data, build_small_fleet, truncate_all

FUZZ_EXAMPLES = int(os.environ.get("GRIDSHIFT_TEST_FUZZ_EXAMPLES", "30"))
CASES: dict[str, int] = {}
SECONDS: dict[str, float] = {}


@pytest.fixture(scope="module")
def fuzz_app(_db_settings):  # type: ignore[no-untyped-def]
    truncate_all(_db_settings)
    app = create_app(replace(_db_settings, rate_limit="1000000 per minute"))
    session = app.extensions["gridshift"].sessions()
    build_small_fleet(session)
    world = World(tokens=_tokens(session))
    add_alpha_data(session, world, datetime(2030, 1, 1, tzinfo=UTC))
    session.close()
    app.config["FUZZ_TOKEN"] = world.tokens["ops-admin"]
    yield app
    app.extensions["gridshift"].engine.dispose()
    truncate_all(_db_settings)


def _schema_app():  # type: ignore[no-untyped-def]
    """An app that only serves the OpenAPI document at import time (requests go to ``fuzz_app``)."""
    tmp = Path(tempfile.mkdtemp(prefix="gs-fuzz-"))
    return create_app(Settings(var_dir=tmp, database_url=f"sqlite:///{tmp / 'schema.db'}", secret_key="x"))


schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", _schema_app())
schema.config.phases.update(
    phases=os.environ.get("GRIDSHIFT_TEST_FUZZ_PHASES", "examples,coverage").split(",")
)


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
def test_api_conforms_to_its_schema(case, fuzz_app):  # type: ignore[no-untyped-def]
    key = f"{case.method} {case.path}"
    CASES[key] = CASES.get(key, 0) + 1
    started = time.perf_counter()
    token = fuzz_app.config["FUZZ_TOKEN"]
    response = case.call_and_validate(
        app=fuzz_app,
        headers={"Authorization": f"Bearer {token}"},
        excluded_checks=[
            schemathesis.checks.positive_data_acceptance,
            schemathesis.checks.negative_data_rejection,
        ],
    )
    assert response.status_code < 500
    SECONDS[key] = SECONDS.get(key, 0.0) + time.perf_counter() - started


def test_fuzzing_generated_enough_cases():
    operations = sum(1 for r in schema.get_all_operations() if isinstance(r, Ok))
    if len(CASES) < operations:
        pytest.skip(f"only {len(CASES)} of {operations} operations were fuzzed in this run (selection)")
    total = sum(CASES.values())
    print(f"\nfuzz: {total} generated cases over {operations} operations, 0 server errors")
    for key, seconds in sorted(SECONDS.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {seconds:6.2f} s  {CASES[key]:4d} cases  {key}")
    assert total >= 1000, CASES
