"""A job's secret env: stored encrypted, never returned, given to the job's process only, rotated with the keys."""

from __future__ import annotations

import hashlib
import json

from sqlalchemy import select

from app import crypto
from app.commands import keys as keys_cmd
from app.db import utcnow
from app.models import IdempotencyKey, Job, JobEvent, Run
from app.services import auth
from app.services.dispatch import claim as dispatch_claim
from app.services.dispatch import submit as dispatch_submit
from tests.app.test_dispatch_support import add_local_clusters, write_plan
from tests.conftest import job_payload, make_token
from tests.security.conftest import bearer

SECRET = "hf_secret_value_0451"


def test_a_secret_env_is_stored_encrypted_and_never_returned(client, session, settings, small_fleet, now):
    headers = bearer(make_token(session, "team-a"))
    body = job_payload(now, env={"PLAIN": "visible"}, secret_env={"HF_TOKEN": SECRET})
    resp = client.post("/api/v1/jobs", json=body, headers=headers)
    assert resp.status_code == 201, resp.json
    assert resp.json["has_secret_env"] is True and resp.json["env"] == {"PLAIN": "visible"}
    job_id = resp.json["id"]
    batch = client.post("/api/v1/jobs/batch", json={"jobs": [body]}, headers={**headers, "Idempotency-Key": "k1"})
    assert batch.status_code == 201
    answers = [resp, batch, client.get(f"/api/v1/jobs/{job_id}", headers=headers),
               client.get("/api/v1/jobs", headers=headers), client.get(f"/api/v1/jobs/{job_id}/events", headers=headers)]
    for answer in answers:
        assert SECRET not in answer.get_data(as_text=True)
    rows = session.scalars(select(Job)).all()
    assert len(rows) == 2
    for row in rows:
        assert SECRET not in json.dumps(row.env) and SECRET not in (row.secret_env_encrypted or "")
        assert crypto.decrypt_json(settings.encryption_keys, row.secret_env_encrypted or "") == {"HF_TOKEN": SECRET}
    assert not any(SECRET in (e.message or "") for e in session.scalars(select(JobEvent)))
    # the Idempotency-Key fingerprint of a body holding a secret is an HMAC, not a hash anyone can recompute
    stored = session.scalar(select(IdempotencyKey.request_hash))
    plain = hashlib.sha256(json.dumps({"jobs": [body]}, sort_keys=True, default=str).encode()).hexdigest()
    assert stored and stored != plain
    again = client.post("/api/v1/jobs/batch", json={"jobs": [body]}, headers={**headers, "Idempotency-Key": "k1"})
    assert again.status_code == 201 and again.json == batch.json  # still idempotent


def test_the_secret_env_reaches_the_runtime_spec_and_is_rotated_with_the_keys(session, settings, small_fleet,
                                                                              tmp_path):  # fmt: skip
    tenant = auth.create_tenant(session, "team-a")
    add_local_clusters(session, tmp_path)
    job = Job(tenant_id=tenant.id, name="j", workload_class="training", gpu_count=1, reference_gpu_hours=1.0,
              reference_hardware="h100", release_at=utcnow(), deadline_at=utcnow().replace(year=2099),
              command="true", env={"PLAIN": "1"},
              secret_env_encrypted=crypto.encrypt_json(settings.encryption_keys, {"HF_TOKEN": SECRET}))  # fmt: skip
    session.add(job)
    session.commit()
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker="w").claimed
    spec = dispatch_submit.build_spec(session, session.get(Run, run_id), settings.encryption_keys)
    assert spec.env["HF_TOKEN"] == SECRET and spec.env["PLAIN"] == "1"
    new_keys = (crypto.generate_key(), *settings.encryption_keys)
    assert keys_cmd.rotate_all(session, new_keys) == 1
    token = session.get(Job, job.id).secret_env_encrypted or ""
    assert crypto.key_index(new_keys, token) == 0 and crypto.decrypt_json(new_keys[:1], token) == {"HF_TOKEN": SECRET}
