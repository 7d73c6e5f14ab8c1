"""A request refused before its body is read still has its body read (and dropped) before the answer goes out.

gunicorn closes the connection after each answer; a close with unread bytes in the socket is a reset, which nginx
reports as 502 instead of the application's 429 (app/drain.py). These tests drive the WSGI application as gunicorn
does, with a body stream the test can inspect, and check that the stream is at its end when the answer is given.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from typing import Any

import pytest
from werkzeug.test import EnvironBuilder

from app import create_app
from app.services import auth
from tests.conftest import job_payload, make_token


class Body(io.BytesIO):
    """A request body that records how much of it was read when the application started its answer."""

    read_at_answer: int | None = None


def call(app, path: str, body: bytes, headers: dict[str, str]) -> tuple[str, Body, dict[str, Any]]:  # type: ignore[no-untyped-def]
    stream = Body(body)
    environ = EnvironBuilder(path=path, method="POST", headers=list(headers.items()), content_type="application/json",
                             content_length=len(body)).get_environ()  # fmt: skip
    environ["wsgi.input"] = stream
    environ["wsgi.input_terminated"] = True  # as gunicorn says: the server bounds the body itself
    seen: dict[str, Any] = {}

    def start_response(status: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        seen["status"], seen["headers"] = status, dict(response_headers)

    answer = app.wsgi_app(environ, start_response)
    stream.read_at_answer = stream.tell()  # the answer's bytes are sent from here on
    seen["body"] = b"".join(answer)
    getattr(answer, "close", lambda: None)()
    return seen["status"], stream, seen


@pytest.fixture
def app(settings):  # type: ignore[no-untyped-def]
    application = create_app(replace(settings, cost_concurrency=1))
    yield application
    application.extensions["gridshift"].engine.dispose()


def big_batch(now) -> bytes:  # type: ignore[no-untyped-def]
    return json.dumps({"jobs": [job_payload(now)] * 400}).encode()  # ~200 kB: an expensive batch


def test_a_batch_refused_429_has_its_body_read_to_the_end(app, session, small_fleet, now) -> None:
    token = make_token(session, "team-a")
    tenant_key = f"tenant:{auth.get_tenant(session, 'team-a').id}"
    slots = app.extensions["gridshift_costs"].slots
    ticket = slots.acquire(tenant_key)  # the tenant's one expensive request is running
    try:
        body = big_batch(now)
        status, stream, seen = call(app, "/api/v1/jobs/batch", body, {"Authorization": f"Bearer {token}"})
    finally:
        slots.release(tenant_key, ticket)
    assert status.startswith("429") and seen["headers"]["Retry-After"]
    assert stream.read_at_answer == len(body)  # nothing left in the socket when gunicorn closes it


def test_a_refusal_before_authentication_reads_the_body_too(app, session, small_fleet, now) -> None:
    body = big_batch(now)
    status, stream, _ = call(app, "/api/v1/jobs/batch", body, {})
    assert status.startswith("401")
    assert stream.read_at_answer == len(body)


def test_an_accepted_body_is_read_once_by_the_application(app, session, small_fleet, now) -> None:
    token = make_token(session, "team-a")
    body = json.dumps(job_payload(now)).encode()
    status, stream, seen = call(app, "/api/v1/jobs", body, {"Authorization": f"Bearer {token}"})
    assert status.startswith("201"), seen["body"][:300]
    assert stream.read_at_answer == len(body)
    assert json.loads(seen["body"])["name"] == json.loads(body)["name"]


def test_a_body_over_the_limit_is_refused_without_being_read(settings, session, small_fleet, now) -> None:
    application = create_app(replace(settings, max_content_length=50_000))
    try:
        body = big_batch(now)
        status, stream, _ = call(application, "/api/v1/jobs/batch", body, {})
    finally:
        application.extensions["gridshift"].engine.dispose()
    assert status.startswith(("401", "413"))
    assert stream.read_at_answer is not None and stream.read_at_answer < len(body)  # the sender's choice of work
