"""Optional runtimes: a test whose SDK, daemon or browser is missing here skips, saying what to install.

`make test` runs on the `dev` extra alone (uv.lock). The cluster runtimes' SDKs come with `make runtimes` (the
`runtimes` extra from the same lock: Ray, Kubernetes); Slurm's daemons and chromium are system packages
(`.ci/runtimes.sh`, `apt-get install -y chromium`) and their fixtures skip on their own. Tests that need an SDK call
:func:`require_module` or :func:`require_connector` and skip with the reason instead of erroring.
"""

from __future__ import annotations

import importlib.util

import pytest

from connectors import available_kinds

#: How to get each optional Python package (all of them pinned in uv.lock).
INSTALL_HINTS = {
    "kubernetes": "`make runtimes` installs the runtimes extra (Ray, Kubernetes) from uv.lock",
    "ray": "`make runtimes` installs the runtimes extra (Ray, Kubernetes) from uv.lock",
}


def missing_module(name: str) -> str | None:
    """The reason a test needing ``import name`` cannot run here, or None when the module is installed."""
    if importlib.util.find_spec(name) is not None:
        return None
    hint = INSTALL_HINTS.get(name, "install it")
    return f"needs the {name!r} package, which is not installed here ({hint})"


def require_module(name: str) -> None:
    """Skip the calling test, with the reason, when the optional package ``name`` is missing."""
    reason = missing_module(name)
    if reason:
        pytest.skip(reason)


def require_connector(kind: str) -> None:
    """Skip the calling test when connector ``kind`` cannot be built here (its SDK is missing)."""
    if kind not in available_kinds():
        module = {"kubernetes": "kubernetes", "ray": "ray"}.get(kind, kind)
        pytest.skip(missing_module(module) or f"connector kind {kind!r} is not available here")
