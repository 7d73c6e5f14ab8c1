"""Minimal slurmrestd client (openapi v0.0.38, JWT) used by :class:`connectors.slurm.SlurmConnector`.

Returns plain dicts shaped like the CLI backend's (``name``, ``job_id``, ``job_state``, ``state_reason``,
``start_time``/``end_time`` as UNIX seconds, ``exit_code``), so the connector maps both in one place.
"""

from __future__ import annotations

from typing import Any

from connectors.base import ConnectorError

API = "/slurm/v0.0.38"

#: Slurm error numbers slurmrestd reports (``error_number``; ``error_code`` in other versions).
INVALID_JOB_ID = 2017  # ESLURM_INVALID_JOB_ID: the controller answered that it has no such job
ALREADY_DONE = (2021, 2084)  # ESLURM_ALREADY_DONE, ESLURM_JOB_FINISHED: nothing left to cancel or release
JOB_HELD = 2042  # expected on a job submitted held


def _error_number(error: dict[str, Any]) -> int | None:
    number = error.get("error_number", error.get("error_code"))
    return number if isinstance(number, int) else None


class SlurmRestClient:
    """HTTP calls to one slurmrestd; every call bounded by ``timeout_s``.

    Parameters
    ----------
    url : str
        Base URL, e.g. ``http://127.0.0.1:6820``.
    user, token : str
        Slurm user name and its JWT (``scontrol token username=USER``).
    timeout_s : float
        Per-request timeout [s].
    """

    def __init__(self, url: str, user: str, token: str, timeout_s: float) -> None:
        import requests

        self._requests = requests
        self.url = url.rstrip("/") + API
        self.timeout_s = timeout_s
        self.session = requests.Session()
        self.session.headers.update({"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token})

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              ok_numbers: tuple[int, ...] = ()) -> dict[str, Any] | None:  # fmt: skip
        """One request; None when the job is gone in a way ``ok_numbers`` accepts (or HTTP 404 for those calls).

        slurmrestd 22.05 answers every failure with HTTP 500, an unknown job and an unreachable controller alike
        (``GET /job/ID`` then says "Unable to find JobId=ID" either way), so only the Slurm error number tells
        them apart; any other failure is raised, retryable when it is a 5xx or 429.
        """
        try:
            response = self.session.request(method, self.url + path, json=body, timeout=self.timeout_s)
        except self._requests.RequestException as exc:
            raise ConnectorError(f"slurmrestd {method} {path}: {exc}", retryable=True, kind="slurm") from exc
        try:
            data = response.json()
        except ValueError:
            data = {}
        errors = [e for e in data.get("errors", []) if _error_number(e) != JOB_HELD]
        if response.status_code >= 400 or (errors and response.status_code != 200):
            if ok_numbers and (response.status_code == 404 or any(_error_number(e) in ok_numbers for e in errors)):
                return None
            text = "; ".join(
                " / ".join(str(e[k]) for k in ("description", "error") if e.get(k)) for e in errors
            ) or response.text[:200]
            raise ConnectorError(
                f"slurmrestd {method} {path}: HTTP {response.status_code}: {text}",
                retryable=response.status_code >= 500 or response.status_code == 429,
                kind="slurm",
            )
        return data

    def jobs_named(self, name: str) -> list[dict[str, Any]]:
        """Jobs the controller still knows with this name."""
        data = self._call("GET", "/jobs") or {}
        return [job for job in data.get("jobs", []) if job.get("name") == name]

    def job(self, job_id: str) -> dict[str, Any] | None:
        """One job, or None when the controller does not know it."""
        data = self._call("GET", f"/job/{job_id}", ok_numbers=(INVALID_JOB_ID,))
        jobs = (data or {}).get("jobs") or []
        return jobs[0] if jobs else None

    def submit(self, script: str, job: dict[str, Any]) -> str:
        """Submit a batch script; return the job id."""
        data = self._call("POST", "/job/submit", {"script": script, "job": job}) or {}
        if "job_id" not in data:
            raise ConnectorError(
                f"slurmrestd submit returned no job id: {data}", retryable=True, kind="slurm"
            )
        return str(data["job_id"])

    def release(self, job_id: str) -> None:
        """Release a held job; one that is unknown or already finished needs no release."""
        self._call("POST", f"/job/{job_id}", {"hold": False}, ok_numbers=(INVALID_JOB_ID, *ALREADY_DONE))

    def cancel(self, job_id: str) -> None:
        """Cancel a job; unknown or finished jobs are ignored, an unreachable controller is raised (retryable)."""
        self._call("DELETE", f"/job/{job_id}", ok_numbers=(INVALID_JOB_ID, *ALREADY_DONE))

    def nodes(self) -> list[dict[str, Any]]:
        """Nodes with ``name``, ``state``, ``gres`` and ``gres_used``."""
        data = self._call("GET", "/nodes") or {}
        return list(data.get("nodes", []))
