"""Kubernetes runtime: one batch/v1 Job per run, named by the run key, through the official client.

GPUs are asked for by the vendor's extended resource (``nvidia.com/gpu``, ``amd.com/gpu``,
``huawei.com/Ascend910``) and placed by a node selector per hardware type. With ``queue`` set, the Job
carries Kueue's ``kueue.x-k8s.io/queue-name`` label and is created suspended for Kueue to admit.
Kubernetes has no delayed start: a Job whose ``begin_at`` lies ahead is created suspended (without the queue
label) and released by the first ``submit`` or ``poll`` after that time. Cancelling suspends the Job and
marks it ``gridshift.io/cancelled``, so it stays visible to ``find`` and is never submitted again.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from datetime import UTC, datetime
from typing import Any, ClassVar

from connectors.base import (
    Capacity,
    ConnectorError,
    EnergyReading,
    JobSpec,
    RunStatus,
    RuntimeState,
    estimate_energy,
    vendor_of,
)

__all__ = ["RESOURCE_NAMES", "KubernetesConnector", "build_job"]

RESOURCE_NAMES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "huawei": "huawei.com/Ascend910"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
HARDWARE_LABEL = "gridshift.io/hardware-type"
A_BEGIN, A_CANCELLED, A_POWER, A_GPUS = (
    "gridshift.io/begin-at", "gridshift.io/cancelled", "gridshift.io/power-w-per-gpu", "gridshift.io/gpu-count")  # fmt: skip
MERGE_PATCH = "application/merge-patch+json"


def build_job(spec: JobSpec, *, namespace: str, image: str, resource_name: str, node_selector: dict[str, str],
              queue: str | None, hold: bool) -> dict[str, Any]:  # fmt: skip
    """The batch/v1 Job manifest (plain JSON) for ``spec``; ``hold`` creates it suspended."""
    container: dict[str, Any] = {
        "name": "main",
        "image": spec.image or image,
        "env": [
            {"name": k, "value": v}
            for k, v in sorted({**spec.env, "GRIDSHIFT_RUN_KEY": spec.run_key}.items())
        ],
    }
    if spec.command is not None:
        container["command"] = ["/bin/sh", "-c", spec.command]
    if spec.gpu_count:
        container["resources"] = {"limits": {resource_name: str(spec.gpu_count)}}
    labels = {"app.kubernetes.io/managed-by": "gridshift", "gridshift.io/run-key": spec.run_key}
    if queue and not hold:
        labels[QUEUE_LABEL] = queue
    annotations = {
        A_POWER: f"{spec.power_w_per_gpu:g}",
        A_GPUS: str(spec.gpu_count),
        "gridshift.io/name": spec.name,
    }
    if spec.begin_at:
        annotations[A_BEGIN] = spec.begin_at.astimezone(UTC).isoformat()
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": spec.run_key,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "suspend": bool(hold or queue),
            "backoffLimit": 0,
            "activeDeadlineSeconds": spec.time_limit_minutes * 60,
            "template": {
                "metadata": {"labels": {"gridshift.io/run-key": spec.run_key}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": node_selector,
                    "containers": [container],
                    # a job gets its own variables only: no API token of the namespace's service account and no
                    # *_SERVICE_HOST/_PORT variables of the namespace's other services
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                },
            },
        },
    }


class KubernetesConnector:
    """Jobs on a Kubernetes cluster (optionally through Kueue)."""

    kind: ClassVar[str] = "kubernetes"
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "host": {
                "type": ["string", "null"],
                "default": None,
                "description": "API server URL; else kubeconfig",
            },
            "token": {"type": ["string", "null"], "default": None, "secret": True},
            "verify_ssl": {"type": "boolean", "default": True},
            "kubeconfig": {"type": ["string", "null"], "default": None},
            "context": {"type": ["string", "null"], "default": None},
            "namespace": {"type": "string", "default": "default"},
            "image": {"type": "string", "default": "busybox:1.36"},
            "queue": {"type": ["string", "null"], "default": None, "description": "Kueue LocalQueue name"},
            "node_selectors": {
                "type": "object",
                "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}},
                "default": {},
                "description": f"hardware code -> node labels (default {{'{HARDWARE_LABEL}': code}})",
            },
            "vendors": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},
            "timeout_s": {"type": "number", "minimum": 0.1, "default": 15.0},
        },
    }

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.namespace = config["namespace"]
        self.timeout_s = float(config["timeout_s"])
        self._apis: tuple[Any, Any, Any] | None = None

    @classmethod
    def enabled(cls) -> bool:
        """True when the official ``kubernetes`` client is installed."""
        return importlib.util.find_spec("kubernetes") is not None

    # -- client --------------------------------------------------------------------------------------------
    def _client(self) -> tuple[Any, Any, Any]:
        """(BatchV1Api, CoreV1Api, ApiException), built on first use."""
        if self._apis is None:
            from kubernetes import client, config

            if self.config["host"]:
                configuration = client.Configuration()
                configuration.host = self.config["host"]
                configuration.verify_ssl = self.config["verify_ssl"]
                if self.config["token"]:
                    configuration.api_key = {"BearerToken": self.config["token"]}
                    configuration.api_key_prefix = {"BearerToken": "Bearer"}
                api_client = client.ApiClient(configuration)
            else:
                api_client = config.new_client_from_config(config_file=self.config["kubeconfig"],
                                                           context=self.config["context"])  # fmt: skip
            self._apis = (client.BatchV1Api(api_client), client.CoreV1Api(api_client), client.ApiException)
        return self._apis

    def _call(self, what: str, method, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        """Call the client with a timeout and return the response JSON (None for a 404 when ``missing_ok``)."""
        api_exception = self._client()[2]
        try:
            response = method(*args, _request_timeout=self.timeout_s, _preload_content=False, **kwargs)
            return json.loads(response.data or b"{}")
        except api_exception as exc:
            if missing_ok and exc.status == 404:
                return None
            reason = exc.reason
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                reason = json.loads(exc.body).get("message", reason)
            retryable = exc.status in (0, 408, 429) or exc.status >= 500
            raise ConnectorError(f"kubernetes {what}: HTTP {exc.status}: {reason}", retryable=retryable,
                                 kind=self.kind) from exc  # fmt: skip
        except Exception as exc:  # urllib3 connection errors and timeouts
            raise ConnectorError(f"kubernetes {what}: {exc}", retryable=True, kind=self.kind) from exc

    def _selector(self, hardware: str) -> dict[str, str]:
        return dict(self.config["node_selectors"].get(hardware, {HARDWARE_LABEL: hardware}))

    def _resource(self, hardware: str) -> str:
        return RESOURCE_NAMES[vendor_of(hardware, self.config["vendors"])]

    # -- protocol ------------------------------------------------------------------------------------------
    def capacity(self) -> Capacity:
        """Allocatable GPUs of ready nodes per hardware type, less the GPU limits of pods placed on them."""
        _, core, _ = self._client()
        nodes = self._call("list nodes", core.list_node)["items"]
        pods = self._call("list pods", core.list_pod_for_all_namespaces,
                          field_selector="status.phase!=Succeeded,status.phase!=Failed")["items"]  # fmt: skip
        hardware_types = set(self.config["node_selectors"]) | {
            n["metadata"].get("labels", {}).get(HARDWARE_LABEL) for n in nodes} - {None}  # fmt: skip
        used_on: dict[str, dict[str, int]] = {}
        gpu_resources = set(RESOURCE_NAMES.values())
        for pod in pods:
            if pod.get("status", {}).get("phase") not in ("Pending", "Running"):
                continue
            node_name = pod.get("spec", {}).get("nodeName")
            for container in pod.get("spec", {}).get("containers", []):
                for key, value in ((container.get("resources") or {}).get("limits") or {}).items():
                    # only GPU counts; cpu and memory limits are quantities such as "500m" or "4Gi"
                    if key in gpu_resources and str(value).isdigit():
                        node_used = used_on.setdefault(node_name, {})
                        node_used[key] = node_used.get(key, 0) + int(value)
        total: dict[str, int] = {}
        free: dict[str, int] = {}
        for hw in sorted(hardware_types):
            selector, resource = self._selector(hw), self._resource(hw)
            for node in nodes:
                labels = node["metadata"].get("labels", {})
                if any(labels.get(k) != v for k, v in selector.items()):
                    continue
                ready = any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in node["status"].get("conditions", [])
                )
                count = int(node["status"].get("allocatable", {}).get(resource, 0))
                total[hw] = total.get(hw, 0) + count
                used = used_on.get(node["metadata"]["name"], {}).get(resource, 0)
                free[hw] = free.get(hw, 0) + (max(0, count - used) if ready else 0)
        return Capacity(gpus_total=total, gpus_free=free)

    def submit(self, spec: JobSpec) -> str:
        """Create the Job named ``spec.run_key``; an existing Job of that name is returned instead."""
        batch, _, _ = self._client()
        if self._job(spec.run_key) is None:
            hold = spec.begin_at is not None and spec.begin_at > datetime.now(UTC)
            manifest = build_job(spec, namespace=self.namespace, image=self.config["image"],
                                 resource_name=self._resource(spec.hardware), node_selector=self._selector(spec.hardware),
                                 queue=self.config["queue"], hold=hold)  # fmt: skip
            try:
                self._call("create job", batch.create_namespaced_job, self.namespace, manifest)
            except ConnectorError as exc:
                if "HTTP 409" not in str(exc):  # 409: another worker created it first
                    raise
        self._release_if_due(spec.run_key)
        return spec.run_key

    def find(self, run_key: str) -> str | None:
        """``run_key`` when a Job of that name exists in the namespace, else None."""
        return run_key if self._job(run_key) is not None else None

    def poll(self, runtime_job_id: str) -> RuntimeState:
        """State from the Job's conditions and counts; releases a held Job whose begin time has come."""
        job = self._release_if_due(runtime_job_id)
        status = job.get("status") or {}
        annotations = job["metadata"].get("annotations") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or [] if c.get("status") == "True"}
        started = _time(status.get("startTime"))
        finished: datetime | None = None
        message = ""
        if "Complete" in conditions:
            state, finished = RunStatus.SUCCEEDED, _time(status.get("completionTime"))
        elif "Failed" in conditions:
            state, finished = RunStatus.FAILED, _time(conditions["Failed"].get("lastTransitionTime"))
            message = conditions["Failed"].get("reason", "")
        elif A_CANCELLED in annotations:
            state, finished, message = RunStatus.CANCELLED, _time(annotations[A_CANCELLED]), "cancelled"
        elif job["spec"].get("suspend") or not status.get("ready"):
            state = RunStatus.PENDING
            message = "waiting for begin time or admission" if job["spec"].get("suspend") else ""
        else:
            state = RunStatus.RUNNING
        exit_code = (
            self._exit_code(runtime_job_id) if state in (RunStatus.SUCCEEDED, RunStatus.FAILED) else None
        )
        return RuntimeState(runtime_job_id, state, started if state is not RunStatus.PENDING else None,
                            finished, exit_code, message)  # fmt: skip

    def cancel(self, runtime_job_id: str) -> None:
        """Suspend the Job (its pods are deleted) and mark it cancelled; finished Jobs are left alone."""
        batch, _, _ = self._client()
        job = self._job(runtime_job_id)
        if job is None:
            raise ConnectorError(
                f"Kubernetes Job {runtime_job_id} does not exist", retryable=False, kind=self.kind
            )
        done = {
            c["type"] for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
        }
        if done & {"Complete", "Failed"} or A_CANCELLED in (job["metadata"].get("annotations") or {}):
            return
        patch = {
            "metadata": {"annotations": {A_CANCELLED: datetime.now(UTC).isoformat()}},
            "spec": {"suspend": True},
        }
        self._call("cancel job", batch.patch_namespaced_job, runtime_job_id, self.namespace, patch,
                   _content_type=MERGE_PATCH)  # fmt: skip

    def energy(self, runtime_job_id: str) -> EnergyReading | None:
        """Profile estimate from the Job's annotations and run time (Kubernetes meters no energy)."""
        state = self.poll(runtime_job_id)
        annotations = (self._job(runtime_job_id) or {}).get("metadata", {}).get("annotations") or {}
        finished = state.finished_at or (datetime.now(UTC) if state.started_at else None)
        return estimate_energy(float(annotations.get(A_POWER, 0)), int(annotations.get(A_GPUS, 0)),
                               state.started_at, finished)  # fmt: skip

    def log(self, runtime_job_id: str, max_bytes: int) -> bytes | None:
        """Tail of the log of the Job's newest pod (``limit_bytes`` counts from the start, so the tail is cut here)."""
        _, core, api_exception = self._client()
        pods = self._call("list pods", core.list_namespaced_pod, self.namespace,
                          label_selector=f"job-name={runtime_job_id}") or {}
        items = sorted(pods.get("items") or [], key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        if not items:
            return None
        name = items[-1]["metadata"]["name"]
        try:
            response = core.read_namespaced_pod_log(name, self.namespace, _request_timeout=self.timeout_s,
                                                    _preload_content=False)
        except api_exception as exc:
            if exc.status in (400, 404):  # the pod has not started a container yet, or is gone
                return None
            raise ConnectorError(f"kubernetes read log: HTTP {exc.status}: {exc.reason}",
                                 retryable=exc.status >= 500, kind=self.kind) from exc
        except Exception as exc:
            raise ConnectorError(f"kubernetes read log: {exc}", retryable=True, kind=self.kind) from exc
        return bytes(response.data or b"")[-max_bytes:]

    # -- helpers -------------------------------------------------------------------------------------------
    def _job(self, name: str) -> dict[str, Any] | None:
        batch, _, _ = self._client()
        return self._call("read job", batch.read_namespaced_job, name, self.namespace, missing_ok=True)

    def _release_if_due(self, name: str) -> dict[str, Any]:
        job = self._job(name)
        if job is None:
            raise ConnectorError(f"Kubernetes Job {name} does not exist", retryable=False, kind=self.kind)
        annotations = job["metadata"].get("annotations") or {}
        labels = job["metadata"].get("labels") or {}
        begin = _time(annotations.get(A_BEGIN))
        held = job["spec"].get("suspend") and A_CANCELLED not in annotations and QUEUE_LABEL not in labels
        if held and (begin is None or begin <= datetime.now(UTC)):
            batch, _, _ = self._client()
            patch: dict[str, Any] = {"spec": {"suspend": True}, "metadata": {"labels": {QUEUE_LABEL: self.config["queue"]}}} \
                if self.config["queue"] else {"spec": {"suspend": False}}  # fmt: skip
            job = self._call("release job", batch.patch_namespaced_job, name, self.namespace, patch,
                             _content_type=MERGE_PATCH)  # fmt: skip
        return job

    def _exit_code(self, name: str) -> int | None:
        _, core, _ = self._client()
        pods = self._call(
            "list pods", core.list_namespaced_pod, self.namespace, label_selector=f"job-name={name}"
        )
        for pod in pods.get("items", []):
            for status in pod.get("status", {}).get("containerStatuses") or []:
                terminated = (status.get("state") or {}).get("terminated")
                if terminated and "exitCode" in terminated:
                    return int(terminated["exitCode"])
        return None


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
