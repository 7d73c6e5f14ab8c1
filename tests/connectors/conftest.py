"""Connector fixtures: the real runtimes (tests.runtimes.fixtures) and a connector per kind that runs here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors import ClusterConnector, get_connector
from tests.connectors.fake_k8s import FakeKubernetes
from tests.runtimes.fixtures import ray_head, slurm_clusters  # noqa: F401 - fixtures
from tests.runtimes.optional import require_connector

#: Kinds the contract test runs against: the local runtime, Slurm through its CLI and slurmrestd, Ray (all
#: real runtimes on loopback) and Kubernetes against the fake API server (no real one can run here).
CONTRACT_KINDS = [
    "local",
    pytest.param("slurm-cli", marks=pytest.mark.slurm),
    pytest.param("slurm-rest", marks=pytest.mark.slurm),
    pytest.param("ray", marks=[pytest.mark.ray, pytest.mark.slow]),
    "kubernetes-fake",
]

FAKE_K8S_NODES = [
    {
        "name": "gpu-h100-1",
        "labels": {"gridshift.io/hardware-type": "h100"},
        "allocatable": {"nvidia.com/gpu": 4},
    },
    {
        "name": "gpu-a100-1",
        "labels": {"gridshift.io/hardware-type": "a100"},
        "allocatable": {"nvidia.com/gpu": 2},
    },
]


@pytest.fixture(params=CONTRACT_KINDS)
def connector(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterConnector]:
    """A connector of each kind against a real runtime, with ``h100`` GPUs (at least 2 free)."""
    kind = request.param
    if kind == "local":
        state_dir: Path = tmp_path_factory.mktemp("local-runtime")
        yield get_connector("local", {"state_dir": str(state_dir), "gpus": {"h100": [0, 1, 2, 3], "a100": [4, 5]},
                                      "meter_interval_s": 0.2})  # fmt: skip
    elif kind.startswith("slurm"):
        clusters = request.getfixturevalue("slurm_clusters")
        yield get_connector("slurm", clusters["gs-eu"].connector_config(kind.split("-")[1]))
    elif kind == "ray":
        head = request.getfixturevalue("ray_head")
        yield get_connector("ray", head.connector_config())
    else:
        require_connector("kubernetes")
        fake = request.getfixturevalue("fake_k8s")
        yield get_connector("kubernetes", {"host": fake.url, "token": "test-token", "namespace": "gridshift"})


@pytest.fixture
def fake_k8s() -> Iterator[FakeKubernetes]:
    """The fake Kubernetes API server (no real one runs here) with an H100 node and an A100 node."""
    fake = FakeKubernetes(FAKE_K8S_NODES).start()
    yield fake
    fake.stop()
