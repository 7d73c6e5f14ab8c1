"""Session fixtures starting real runtimes on loopback; reusable from any conftest.

Use them with ``from tests.runtimes.fixtures import slurm_clusters, ray_head  # noqa: F401`` in a conftest,
or ``pytest_plugins = ["tests.runtimes.fixtures"]`` in tests/conftest.py. Each runtime is started at most once
per test process and stopped at the end of the session; a runtime that truly cannot be installed or started
here skips the tests that need it, with the reason.

* ``slurm_clusters``: ``{"gs-eu": SlurmCluster, "gs-us": SlurmCluster}``, two one-node clusters (= two regions)
  on their own ports with GPU GRES ``h100:4,a100:2`` and ``h200:2,l40s:4``, each with slurmrestd (JWT).
  ``cluster.connector_config("cli" | "rest")`` is the config for ``get_connector("slurm", ...)``.
* ``ray_head``: a Ray head with custom resources ``H100: 4`` and ``A100: 2``;
  ``head.connector_config()`` is the config for ``get_connector("ray", ...)``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runtimes.ray_head import RayHead, start_ray_head
from tests.runtimes.slurm import RuntimeUnavailable, SlurmCluster, SlurmLab

SLURM_REGIONS = {"gs-eu": {"h100": 4, "a100": 2}, "gs-us": {"h200": 2, "l40s": 4}}

_started: dict[str, object] = {}


@pytest.fixture(scope="session")
def slurm_clusters() -> Iterator[dict[str, SlurmCluster]]:
    """Two one-node Slurm clusters on loopback (regions ``gs-eu`` and ``gs-us``), with slurmrestd."""
    if "slurm_error" in _started:
        pytest.skip(str(_started["slurm_error"]))
    lab = _started.get("slurm")
    owner = lab is None
    if lab is None:
        lab = SlurmLab(SLURM_REGIONS, rest=True)
        try:
            lab.start()
        except RuntimeUnavailable as exc:
            _started["slurm_error"] = f"Slurm cannot run here: {exc}"
            pytest.skip(str(_started["slurm_error"]))
        _started["slurm"] = lab
    assert isinstance(lab, SlurmLab)
    yield lab.clusters
    if owner:
        lab.stop()
        _started.pop("slurm", None)


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    """A local Ray head on free ports (not 6379) with resources H100=4, A100=2."""
    if "ray_error" in _started:
        pytest.skip(str(_started["ray_error"]))
    head = _started.get("ray")
    owner = head is None
    if head is None:
        try:
            head = start_ray_head()
        except RuntimeUnavailable as exc:
            _started["ray_error"] = f"Ray cannot run here: {exc}"
            pytest.skip(str(_started["ray_error"]))
        _started["ray"] = head
    assert isinstance(head, RayHead)
    yield head
    if owner:
        head.stop()
        _started.pop("ray", None)
