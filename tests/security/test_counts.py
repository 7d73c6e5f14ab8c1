"""No leak in counts: bravo's lists, overviews and reports are the same before and after alpha's data exists."""

from __future__ import annotations

import pytest

from tests.conftest import job_payload
from tests.security.conftest import World, _tokens, add_alpha_data, add_shared_rows, bearer
from tests.security.test_isolation import ROUTES, _normal


def _views(client, token: str, bravo_job: int) -> dict[str, str]:
    """Bravo's answer on every GET route without a path argument, and with its own job id."""
    out = {}
    for method, rule, args in ROUTES:
        if method != "GET" or any(f"<{a}>" in rule or f":{a}>" in rule for a in args if a != "job_id"):
            continue
        url = rule.replace("<int:job_id>", str(bravo_job))
        resp = client.get(url, headers=bearer(token))
        if not resp.is_json:
            continue  # pages and PDFs carry per-request nonces and dates; the marker test covers them
        out[url] = f"{resp.status_code} {_normal(resp.get_data().decode('utf-8', 'replace'))}"
    return out


@pytest.fixture
def before_after(client, session, small_fleet, now):  # type: ignore[no-untyped-def]
    world = World(tokens=_tokens(session))
    token = world.tokens["bravo-member"]
    resp = client.post("/api/v1/jobs", json=job_payload(now, name="bravo-own"), headers=bearer(token))
    assert resp.status_code == 201, resp.json
    bravo_job = resp.json["id"]
    add_shared_rows(session, now)  # the plan exists before and after: only alpha's share of it changes
    before = _views(client, token, bravo_job)
    add_alpha_data(session, world, now)
    return before, _views(client, token, bravo_job)


def test_lists_and_reports_do_not_count_other_tenants(before_after):
    before, after = before_after
    assert len(before) >= 3
    changed = {url: (before[url][:300], after[url][:300]) for url in before if before[url] != after[url]}
    assert not changed, changed
