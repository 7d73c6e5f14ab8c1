"""A tiny fake Kubernetes API server for tests: batch/v1 Jobs, their pods, and nodes, in memory.

No real API server can run on these machines (see /work/shared/RUNTIME-NOTES.md), so the Kubernetes
connector is tested against this fake. It speaks the JSON the official client sends and reads, and acts as
scheduler and kubelet too: an unsuspended Job whose pod fits a node (node selector + GPU resource) runs its
command as a local ``sh -c`` process (the image is ignored); suspending the Job kills the pod;
``activeDeadlineSeconds`` fails it with ``DeadlineExceeded``. Every request is recorded in ``requests``.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_JOBS = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?$")
_PODS = re.compile(r"^/api/v1/(?:namespaces/([^/]+)/)?pods$")
_POD_LOG = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason,
            "code": code}  # fmt: skip


class FakeKubernetes:
    """In-memory cluster: ``nodes`` is a list of ``{"name", "labels", "allocatable"}``."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.pod_logs: dict[str, str] = {}  # pod name -> its container's output
        self.procs: dict[tuple[str, str], subprocess.Popen] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.RLock()
        self._stop = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._threads = [threading.Thread(target=self.server.serve_forever, daemon=True),
                         threading.Thread(target=self._kubelet, daemon=True)]  # fmt: skip

    def start(self) -> FakeKubernetes:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            for proc in self.procs.values():
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()

    # -- "scheduler" and "kubelet" -------------------------------------------------------------------------
    def _requests_of(self, job: dict[str, Any]) -> dict[str, int]:
        container = job["spec"]["template"]["spec"]["containers"][0]
        limits = (container.get("resources") or {}).get("limits") or {}
        return {k: int(v) for k, v in limits.items() if "/" in k}

    def _free_node(self, job: dict[str, Any]) -> str | None:
        selector = job["spec"]["template"]["spec"].get("nodeSelector") or {}
        wanted = self._requests_of(job)
        for node in self.nodes:
            if any(node["labels"].get(k) != v for k, v in selector.items()):
                continue
            used: dict[str, int] = {}
            for pod in self.pods.values():
                if pod["spec"].get("nodeName") == node["name"] and pod["status"]["phase"] in (
                    "Pending",
                    "Running",
                ):
                    for k, v in pod["spec"]["containers"][0]["resources"]["limits"].items():
                        used[k] = used.get(k, 0) + int(v)
            if all(int(node["allocatable"].get(k, 0)) - used.get(k, 0) >= n for k, n in wanted.items()):
                return node["name"]
        return None

    def _kubelet(self) -> None:
        while not self._stop.wait(0.05):
            with self.lock:
                for key, job in list(self.jobs.items()):
                    self._step(key, job)

    def _step(self, key: tuple[str, str], job: dict[str, Any]) -> None:
        status = job.setdefault("status", {})
        if any(c["type"] in ("Complete", "Failed") for c in status.get("conditions", [])):
            return
        proc = self.procs.get(key)
        if job["spec"].get("suspend"):
            if proc is not None:
                proc.kill()
                proc.wait()
                del self.procs[key]
                self.pods[key]["status"]["phase"] = "Failed"
            status.update(active=0, ready=0)
            if not any(c["type"] == "Suspended" for c in status.get("conditions", [])):
                status.setdefault("conditions", []).append(
                    {
                        "type": "Suspended",
                        "status": "True",
                        "reason": "JobSuspended",
                        "lastTransitionTime": _now(),
                    }
                )
            return
        status["conditions"] = [c for c in status.get("conditions", []) if c["type"] != "Suspended"]
        if proc is None:
            node = self._free_node(job)
            template = job["spec"]["template"]["spec"]
            pod = {"metadata": {"name": f"{key[1]}-{uuid.uuid4().hex[:5]}", "namespace": key[0],
                                "labels": {"job-name": key[1], "batch.kubernetes.io/job-name": key[1]}},
                   "spec": {**template, "nodeName": node}, "status": {"phase": "Pending"}}  # fmt: skip
            self.pods[key] = pod
            status.update(active=1, ready=0)
            if node is None:
                return
            container = template["containers"][0]
            env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
            self.procs[key] = subprocess.Popen([*container["command"], *container.get("args", [])], env=env,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            pod["status"] = {"phase": "Running", "containerStatuses": [{"name": container["name"], "ready": True,
                                                                        "state": {"running": {"startedAt": _now()}}}]}  # fmt: skip
            status.update(ready=1, startTime=status.get("startTime") or _now())
            return
        code = proc.poll()
        deadline = job["spec"].get("activeDeadlineSeconds")
        started = datetime.strptime(status["startTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        if code is None and deadline and (datetime.now(UTC) - started).total_seconds() > deadline:
            proc.kill()
            code = proc.wait()
            reason = "DeadlineExceeded"
        elif code is None:
            return
        else:
            reason = "BackoffLimitExceeded"
        del self.procs[key]
        pod = self.pods[key]
        pod["status"] = {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
            {"name": "main", "ready": False, "state": {"terminated": {"exitCode": code, "finishedAt": _now()}}}]}  # fmt: skip
        status.update(active=0, ready=0)
        if code == 0:
            status.update(succeeded=1, completionTime=_now())
            status["conditions"] = [{"type": "Complete", "status": "True", "lastTransitionTime": _now()}]
        else:
            status["failed"] = 1
            status["conditions"] = [{"type": "Failed", "status": "True", "reason": reason,
                                     "lastTransitionTime": _now()}]  # fmt: skip

    # -- HTTP ----------------------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _send(self, code: int, body: dict[str, Any] | str) -> None:
                text = isinstance(body, str)  # a pod's log is plain text
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain" if text else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_PATCH(self) -> None:
                self._route("PATCH")

            def do_DELETE(self) -> None:
                self._route("DELETE")

            def _route(self, method: str) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                fake.requests.append((method, self.path))
                with fake.lock:
                    code, body = fake.handle(method, url.path, query, self._body() if method in ("POST", "PATCH")
                                             else None, self.headers.get("Content-Type", ""))  # fmt: skip
                self._send(code, body)

        return Handler

    def handle(self, method: str, path: str, query: dict[str, str], body: Any,
               content_type: str) -> tuple[int, Any]:  # fmt: skip
        log = _POD_LOG.match(path)
        if log and method == "GET":
            if log.group(2) not in self.pod_logs:
                return 404, _status(404, "NotFound", f"pods {log.group(2)!r} not found")
            return 200, self.pod_logs[log.group(2)]
        if path == "/api/v1/nodes" and method == "GET":
            items = [{"metadata": {"name": n["name"], "labels": n["labels"]},
                      "status": {"allocatable": {k: str(v) for k, v in n["allocatable"].items()},
                                 "conditions": [{"type": "Ready", "status": "True"}]}} for n in self.nodes]  # fmt: skip
            return 200, {"kind": "NodeList", "apiVersion": "v1", "items": items}
        match = _PODS.match(path)
        if match and method == "GET":
            selector = query.get("labelSelector", "")
            pods = [p for (ns, _), p in self.pods.items() if match.group(1) in (None, ns)]
            if selector:
                key, _, value = selector.partition("=")
                pods = [p for p in pods if p["metadata"]["labels"].get(key) == value]
            return 200, {"kind": "PodList", "apiVersion": "v1", "items": pods}
        match = _JOBS.match(path)
        if not match:
            return 404, _status(404, "NotFound", f"the server could not find the requested resource {path}")
        namespace, name = match.groups()
        if method == "POST" and name is None:
            name = body["metadata"]["name"]
            if (namespace, name) in self.jobs:
                return 409, _status(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            body["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now())
            body.setdefault("status", {})
            self.jobs[(namespace, name)] = body
            return 201, body
        if name is None and method == "GET":
            items = [j for (ns, _), j in self.jobs.items() if ns == namespace]
            return 200, {"kind": "JobList", "apiVersion": "batch/v1", "items": items}
        job = self.jobs.get((namespace, name or ""))
        if job is None:
            return 404, _status(404, "NotFound", f'jobs.batch "{name}" not found')
        if method == "GET":
            return 200, job
        if method == "PATCH":
            if "merge-patch" not in content_type and "strategic" not in content_type:
                return 415, _status(
                    415, "UnsupportedMediaType", f"this fake accepts merge patches, not {content_type}"
                )
            _merge(job, body)
            return 200, job
        if method == "DELETE":
            job["spec"]["suspend"] = True
            self._step((namespace, name or ""), job)
            del self.jobs[(namespace, name or "")]
            return 200, _status(200, "", "deleted") | {"status": "Success"}
        return 405, _status(405, "MethodNotAllowed", method)


def wait_until(predicate, timeout_s: float = 10.0) -> bool:
    """Poll ``predicate`` until true or timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())
