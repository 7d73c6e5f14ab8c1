"""Tenant isolation over every route of the app, enumerated from its url_map so that new endpoints are covered.

Bravo (admin and member tokens, and a dashboard session) calls every route with alpha's ids. The rules:
- never a 5xx;
- no response body contains any of alpha's markers (names, batch id, ids, command, env);
- a 404 for alpha's id is indistinguishable from the 404 for an id that does not exist (no leak in errors);
- after all of it alpha's jobs, tokens and runs are unchanged (no cross-tenant write went through);
- bravo's list and report views are the same before and after alpha's data exists (no leak in counts).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app import create_app
from app.config import Settings
from app.models import ApiToken, Job, Run
from app.services import auth as auth_service
from tests.security.conftest import MISSING_ID, World, add_alpha_data, bearer

SKIP_PREFIXES = ("/static/", "/api/v1/docs")
PUBLIC = {"/api/v1/health", "/api/v1/openapi.json"}
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2}|Z)?")


def _routes() -> list[tuple[str, str, tuple[str, ...]]]:
    """(method, rule, argument names) for every route of a freshly built app."""
    tmp = Path(tempfile.mkdtemp(prefix="gs-routes-"))
    app = create_app(Settings(var_dir=tmp, database_url=f"sqlite:///{tmp / 'r.db'}", secret_key="x"))
    out = []
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith(SKIP_PREFIXES) or rule.rule in PUBLIC:
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            out.append((method, rule.rule, tuple(sorted(rule.arguments))))
    app.extensions["gridshift"].engine.dispose()
    return sorted(out)


ROUTES = _routes()
STRING_ARGS = {
    "code": "de",
    "hw": "h100",
    "hardware": "h100",
    "region": "de",
    "name": "de-local",
    "zone": "DE",
}


def _id_kinds(arg: str) -> list[str]:
    """Which of alpha's id lists an int argument may refer to (all of them when the name says nothing)."""
    for kind in ("job", "plan", "run", "token", "assignment", "cluster", "contract"):
        if arg.startswith(kind):
            return [kind]
    return ["job", "plan", "run", "token", "assignment", "contract"]


def _urls(rule: str, args: tuple[str, ...], world: World) -> list[tuple[str, str]]:
    """(url with alpha's ids, the same url with an id that exists nowhere); one pair per id tried."""
    int_args = [a for a in args if f"<int:{a}>" in rule]
    base = rule
    for a in args:
        if a not in int_args:
            base = re.sub(rf"<(?:[a-z]+:)?{a}>", STRING_ARGS.get(a, "x"), base)
    if not int_args:
        return [(base, base)]
    pairs = []
    kinds = {k for a in int_args for k in _id_kinds(a)}
    for kind in sorted(kinds):
        for value in world.alpha_ids.get(kind, []):
            url = missing = base
            for a in int_args:
                url = url.replace(f"<int:{a}>", str(value))
                missing = missing.replace(f"<int:{a}>", str(MISSING_ID))
            pairs.append((url, missing))
    return pairs


SESSION = "<dashboard session>"
REQUESTS: list[int] = []  # statuses of every cross-tenant request the matrix made


def _call(client: Any, method: str, url: str, token: str, query: str = "") -> Any:
    # a dashboard session (pages and the API behind them) carries its CSRF header instead of a bearer token
    kw: dict[str, Any] = {"headers": {"X-CSRF-Token": "csrf-x"} if token == SESSION else bearer(token)}
    if method in ("POST", "PUT", "PATCH"):
        kw["json"] = {}
    resp = client.open(url + query, method=method, **kw)
    REQUESTS.append(resp.status_code)
    return resp


def _normal(body: str, *ids: str) -> str:
    for i in ids:
        body = body.replace(i, "<id>")
    return _ISO.sub("<ts>", body)


@pytest.fixture(scope="module")
def shared(_db_settings):  # type: ignore[no-untyped-def]
    """One app and one world for the whole matrix (built once: the matrix has a case per route and role)."""
    from datetime import UTC, datetime

    from tests.security.conftest import _tokens, build_small_fleet, truncate_all

    truncate_all(_db_settings)
    app = create_app(_db_settings)
    session = app.extensions["gridshift"].sessions()
    build_small_fleet(session)
    world = World(tokens=_tokens(session))
    add_alpha_data(session, world, datetime(2030, 1, 1, tzinfo=UTC))
    yield app, session, world
    session.close()
    app.extensions["gridshift"].engine.dispose()
    truncate_all(_db_settings)


@pytest.mark.parametrize("attacker", ["bravo-admin", "bravo-member", "bravo-session"])
@pytest.mark.parametrize(("method", "rule", "args"), ROUTES, ids=[f"{m} {r}" for m, r, _ in ROUTES])
def test_route_never_shows_or_changes_another_tenants_data(shared, method, rule, args, attacker):
    app, session, world = shared
    client = app.test_client()
    if attacker == "bravo-session":  # signed in to the dashboard as bravo's admin
        token = SESSION
        token_id = session.scalar(select(ApiToken.id).where(ApiToken.name == "bravo-inc-admin"))
        with client.session_transaction() as cookie:
            cookie["token_id"], cookie["csrf"] = token_id, "csrf-x"
            cookie["sid"] = auth_service.open_web_session(session, token_id)  # as the sign-in records it
    else:
        token = world.tokens[attacker]
    queries = [""]
    if method == "GET":
        queries.append(
            f"?batch_id={world.alpha_batch}&job_id={world.alpha_ids['job'][0]}"
            f"&plan_id={world.alpha_ids['plan'][0]}&tenant=alpha-corp"
        )
    for url, missing in _urls(rule, args, world):
        for query in queries:
            resp = _call(client, method, url, token, query)
            body = resp.get_data().decode("utf-8", "replace")
            where = f"{attacker} {method} {url}{query} -> {resp.status_code}"
            assert resp.status_code < 500, where + " " + body[:300]
            leaked = [m for m in set(world.markers) if m in body and m not in url + query]  # echoes are fine
            assert not leaked, f"{where} leaks {leaked}: {body[:300]}"
            if resp.status_code == 404 and url != missing:
                other = _call(client, method, missing, token, query)
                assert other.status_code == 404, where
                value = url.rsplit("/", 2)
                ids = [p for p in value if p.isdigit()] + [str(MISSING_ID)]
                assert _normal(body, *ids) == _normal(other.get_data().decode("utf-8", "replace"), *ids), (
                    where
                )
    _assert_alpha_untouched(session, world)


def _assert_alpha_untouched(session, world: World) -> None:
    session.expire_all()
    states = dict(session.execute(select(Job.id, Job.state).where(Job.id.in_(world.alpha_ids["job"]))).all())
    assert [states[j].value for j in world.alpha_ids["job"]] == ["pending", "planned", "running", "succeeded"]
    revoked = session.scalars(
        select(ApiToken.name).where(
            ApiToken.id.in_(world.alpha_ids["token"]), ApiToken.revoked_at.is_not(None)
        )
    ).all()
    assert revoked == []
    runs = session.scalars(select(Run.state).where(Run.id.in_(world.alpha_ids["run"]))).all()
    assert sorted(r.value for r in runs) == ["running", "succeeded"]


def test_every_api_route_is_in_the_matrix():
    rules = {r for _m, r, _a in ROUTES}
    for expected in (
        "/api/v1/jobs",
        "/api/v1/jobs/<int:job_id>",
        "/api/v1/jobs/<int:job_id>/cancel",
        "/api/v1/tokens/<int:token_id>",
    ):
        assert expected in rules


def test_matrix_summary():
    if not REQUESTS:
        pytest.skip("the matrix did not run in this selection")
    by_status = {code: REQUESTS.count(code) for code in sorted(set(REQUESTS))}
    print(
        f"\nisolation: {len(ROUTES)} route-methods x 3 callers, {len(REQUESTS)} cross-tenant requests: {by_status}"
    )
    assert all(code < 500 for code in REQUESTS)
