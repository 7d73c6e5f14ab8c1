"""Every outbound call to a runtime or a data source has a timeout (a hung peer must not hang a worker).

A static check over connectors/ and forecasting/sources/: each HTTP call through requests (module functions or a
session), urllib's urlopen and each blocking subprocess call (run, check_output, check_call, communicate, wait)
passes ``timeout=`` (or forwards ``**kwargs`` that carry one).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = [REPO / "connectors", REPO / "forecasting" / "sources"]
HTTP_VERBS = {"get", "post", "put", "patch", "delete", "head", "options", "request"}
BLOCKING_SUBPROCESS = {"run", "check_output", "check_call", "call"}
WAITS = {"communicate", "wait"}
# The local runtime's supervisor *is* the runtime: it waits on its own job process for the job's lifetime.
EXEMPT = {"connectors/local_supervisor.py"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func) + "()"
    return "?"


def _needs_timeout(call: ast.Call) -> bool:
    if not isinstance(call.func, ast.Attribute):
        return isinstance(call.func, ast.Name) and call.func.id == "urlopen"
    name, owner = call.func.attr, _dotted(call.func.value)
    if name in HTTP_VERBS and (owner.endswith("requests") or "session" in owner.lower()):
        return True
    if name in BLOCKING_SUBPROCESS and owner.endswith("subprocess"):
        return True
    if name == "urlopen":
        return True
    # Popen objects: proc.wait() / proc.communicate() block until the child ends
    return name in WAITS and any(word in owner.lower() for word in ("proc", "child", "popen"))


def _has_timeout(call: ast.Call) -> bool:
    return any(k.arg == "timeout" or k.arg is None for k in call.keywords)


def _violations() -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            if str(path.relative_to(REPO)) in EXEMPT:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and _needs_timeout(node) and not _has_timeout(node):
                    out.append(
                        f"{path.relative_to(REPO)}:{node.lineno}: {_dotted(node.func)}(...) has no timeout"
                    )
    return out


def test_every_outbound_call_has_a_timeout():
    assert PACKAGES[0].exists()
    assert _violations() == []


def test_the_check_sees_a_missing_timeout(tmp_path):
    sample = ast.parse("import requests, subprocess\nrequests.get(u)\nsubprocess.run(['x'])\nproc.wait()\n")
    calls = [n for n in ast.walk(sample) if isinstance(n, ast.Call)]
    assert sum(_needs_timeout(c) and not _has_timeout(c) for c in calls) == 3
    fixed = ast.parse("requests.get(u, timeout=5)\nsubprocess.run(['x'], timeout=5)\nproc.wait(timeout=1)\n")
    assert not any(
        _needs_timeout(c) and not _has_timeout(c) for c in ast.walk(fixed) if isinstance(c, ast.Call)
    )
