"""Build and deployment files: the compose stack's order and secrets, the image's stages, the Makefile's lock path."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib

import pytest
import yaml

from tests.conftest import REPO

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
MAKEFILE = (REPO / "Makefile").read_text()
SECRETS = {"POSTGRES_PASSWORD", "GRIDSHIFT_SECRET_KEY", "GRIDSHIFT_ENCRYPTION_KEYS"}


def test_migrate_runs_once_before_web_worker_and_beat() -> None:
    migrate = SERVICES["migrate"]
    assert migrate["command"] == ["gridshift", "db", "upgrade"]
    assert migrate["restart"] == "no"  # one-shot: it exits 0 and stays down
    for name in ("web", "worker", "beat"):
        depends = SERVICES[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends["postgres"] == {"condition": "service_healthy"}, name
        assert "db upgrade" not in " ".join(SERVICES[name]["command"]), f"{name} must not migrate itself"


def test_only_secrets_are_required_and_env_example_names_them() -> None:
    text = (REPO / "docker-compose.yml").read_text()
    required = set(re.findall(r"\$\{(\w+):\?", text))
    bare = set(re.findall(r"\$\{(\w+)\}", text))
    assert required == SECRETS, "non-secret variables need a default (${VAR:-default})"
    assert not bare, f"variables without a default or an error message: {bare}"
    example = (REPO / ".env.example").read_text()
    given = set(re.findall(r"^(\w+)=\S+", example, flags=re.M))
    assert given >= SECRETS
    assert ".env" in (REPO / ".gitignore").read_text().split()


def test_compose_check_passes_on_a_clean_clone(tmp_path) -> None:
    if shutil.which("docker-compose") is None:
        pytest.skip("needs docker-compose (apt-get install -y docker-compose)")
    if (REPO / ".env").exists():
        pytest.skip("a .env exists in this checkout; the clean-clone case reads .env.example")
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    res = subprocess.run(["make", "-s", "compose-check"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr


def test_image_is_built_from_the_lock_in_two_stages_without_compilers_in_the_last() -> None:
    text = (REPO / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) >= 2, "a build stage and a final stage"
    build, final = stages[0], stages[-1]
    assert "uv sync --locked" in build
    assert re.search(r"COPY .*uv\.lock", build)
    assert "COPY --from=build /opt/venv" in final
    for tool in ("build-essential", "gcc", "apt-get install", "pip install"):
        assert tool not in final, f"the final image must not install {tool}"
    uv_version = re.search(r"^UV_VERSION := (\S+)", MAKEFILE, flags=re.M).group(1)  # type: ignore[union-attr]
    assert f"uv=={uv_version}" in build, "the image and the Makefile pin the same uv"


def test_lock_covers_every_extra_and_make_installs_from_it() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    ours = next(p for p in lock["package"] if p["name"] == "gridshift")
    locked = {p["name"] for p in lock["package"]}
    extras = pyproject["project"]["optional-dependencies"]
    assert set(ours["optional-dependencies"]) == set(extras)
    for requirements in [pyproject["project"]["dependencies"], *extras.values()]:
        for req in requirements:
            name = re.split(r"[\[<>=!~;\s]", req, maxsplit=1)[0].lower().replace("_", "-")
            assert name in locked, f"{name} is not in uv.lock: run `make lock`"
    assert re.search(r"sync --locked", MAKEFILE)
    for target in ("lock", "lock-upgrade", "lock-check", "runtimes"):
        assert re.search(rf"^{target}:", MAKEFILE, flags=re.M), target
    for script in (".ci/run", ".ci/runtimes.sh"):
        code = [line.split("#")[0] for line in (REPO / script).read_text().splitlines()]
        assert not any("pip install" in line for line in code), (
            f"{script}: the Python environment comes from make"
        )


def test_make_run_takes_host_and_port() -> None:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    res = subprocess.run(["make", "-n", "run", "HOST=0.0.0.0", "PORT=8123"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "gridshift run --host 0.0.0.0 --port 8123" in res.stdout


def test_only_the_worker_runs_as_root_so_its_local_jobs_get_pool_users() -> None:
    """The worker must be root to run local jobs as pool users (docs/security.md); web, beat and migrate keep the
    image's unprivileged user, which the Dockerfile sets."""
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^USER gridshift$", dockerfile, re.M)
    assert str(SERVICES["worker"].get("user")) == "0"
    for name in ("web", "beat", "migrate"):
        assert "user" not in SERVICES[name], f"{name} needs no root"


def test_web_counts_metrics_across_its_gunicorn_workers() -> None:
    """/metrics under several gunicorn workers: the master's hooks (app.gunicorn_conf) and a per-worker folder."""
    web = SERVICES["web"]
    command = web["command"]
    assert command[0] == "gunicorn"
    assert "-c" in command and command[command.index("-c") + 1] == "python:app.gunicorn_conf"
    folder = web["environment"]["PROMETHEUS_MULTIPROC_DIR"]
    mounts = [str(m).split(":")[0] for m in web.get("tmpfs", [])]
    mounts += [str(v).split(":")[1] for v in web.get("volumes", []) if ":" in str(v)]
    assert any(folder == m or folder.startswith(m.rstrip("/") + "/") for m in mounts), \
        "the metrics folder is on a tmpfs or a volume: written by every worker, emptied on start"
    for name in ("worker", "beat", "migrate"):
        assert "PROMETHEUS_MULTIPROC_DIR" not in (SERVICES[name].get("environment") or {}), name


def test_scraping_web_covers_the_heavy_pool_too() -> None:
    """web's /metrics reads web-heavy's folder (GRIDSHIFT_METRICS_POOL_DIRS), which both mount from one volume;
    each pool writes a folder of its own (a master empties its folder on start, and pids repeat across
    containers, so a shared folder would mix or lose counts)."""
    web, heavy = SERVICES["web"]["environment"], SERVICES["web-heavy"]["environment"]
    assert web["PROMETHEUS_MULTIPROC_DIR"] != heavy["PROMETHEUS_MULTIPROC_DIR"]
    assert heavy["PROMETHEUS_MULTIPROC_DIR"] in web["GRIDSHIFT_METRICS_POOL_DIRS"].split(",")

    def volume_of(name: str, folder: str) -> str:
        for entry in SERVICES[name].get("volumes", []):
            source, target = str(entry).split(":")[:2]
            if folder.startswith(target.rstrip("/") + "/"):
                return source
        raise AssertionError(f"{name}: {folder} is on no volume")

    shared = volume_of("web", web["PROMETHEUS_MULTIPROC_DIR"])
    assert shared in COMPOSE["volumes"] and volume_of("web-heavy", heavy["PROMETHEUS_MULTIPROC_DIR"]) == shared
    assert volume_of("web", heavy["PROMETHEUS_MULTIPROC_DIR"]) == shared
