"""Per-tenant submit users of the Slurm connector: who a tenant's jobs run as, and their private output directory.

Slurm lets a job read the batch script (with its environment) of any job of the same user, so the connector submits
each tenant's jobs as that tenant's own unprivileged user (``run_as``); see :mod:`connectors.slurm`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import re
import stat
from typing import Any

from connectors.base import ConfigError, ConnectorError

__all__ = ["check_run_as", "tenant_user", "tenant_workdir"]

#: OS user names: what useradd accepts, at most 32 characters.
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


def check_run_as(config: dict[str, Any], kind: str) -> str:
    """``tenant`` or ``service``: what the config's ``run_as`` means here; a setting that cannot work is refused.

    ``auto`` is ``tenant`` where that can work (CLI mode, service running as root) and ``service`` elsewhere.

    Raises
    ------
    ConfigError
        ``run_as: tenant`` in REST mode or without root, ``run_as: service`` in CLI mode as root (jobs would run as
        root) (field ``config.run_as``), or a ``tenant_users`` entry that is no unprivileged user name (field
        ``config.tenant_users.<slug>``).
    """
    for tenant, user in config["tenant_users"].items():
        if not USER_NAME.match(user) or user == "root":
            raise ConfigError(f"config.tenant_users.{tenant}: {user!r} is not an unprivileged user name",
                              field=f"config.tenant_users.{tenant}", kind=kind)  # fmt: skip
    run_as = config["run_as"]
    can_switch = config["mode"] == "cli" and os.geteuid() == 0
    if run_as == "auto":
        return "tenant" if can_switch else "service"
    if run_as == "service" and can_switch:
        raise ConfigError("config.run_as: 'service' would run every tenant's jobs as root (the service's user): use "
                          "'tenant' or 'auto'", field="config.run_as", kind=kind)  # fmt: skip
    if run_as == "tenant" and not can_switch:
        why = ("mode is 'rest' (jobs run as the token's user: bind the cluster to one tenant with config.tenant)"
               if config["mode"] == "rest" else "the service does not run as root (it cannot submit as another user)")
        raise ConfigError(f"config.run_as: 'tenant' cannot work here: {why}", field="config.run_as", kind=kind)
    return str(run_as)


def tenant_user(config: dict[str, Any], tenant: str | None) -> str | None:
    """The user name of ``tenant``: ``tenant_users[tenant]``, else ``tenant_user_prefix`` + slug (a hash of the slug
    when that makes no valid name); None for a job of no tenant (it runs as the service)."""
    if tenant is None:
        return None
    named = config["tenant_users"].get(tenant)
    if named:
        return str(named)
    prefix = config["tenant_user_prefix"]
    name = f"{prefix}{tenant}"
    if not USER_NAME.match(name):  # too long (slugs reach 63 characters, user names 32)
        name = f"{prefix}{hashlib.sha256(tenant.encode()).hexdigest()[:12]}"
    if not USER_NAME.match(name):
        raise ConfigError(f"config.tenant_user_prefix: {prefix!r} makes no valid user name",
                          field="config.tenant_user_prefix", kind="slurm")  # fmt: skip
    return name


def tenant_workdir(config: dict[str, Any], user: str, kind: str) -> str:
    """``<workdir>/<user>``, a directory of the user alone (0700), created or re-checked: its jobs' output there is
    no one else's to read. A missing user is created (``create_users``) like the local runtime's pool users.

    Raises
    ------
    ConnectorError
        Not retryable: the user does not exist (and ``create_users`` is off) or has uid 0, or the path is not a
        directory of the user or root (a symlink someone planted, say), or it cannot be made.
    """
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        if not config["create_users"]:
            raise ConnectorError(f"Slurm submit user {user!r} does not exist (config.create_users is off: create "
                                 "it on every node)", retryable=False, kind=kind) from None  # fmt: skip
        from connectors.local_users import ensure_user

        try:
            entry = ensure_user(user)
        except RuntimeError as exc:
            raise ConnectorError(str(exc), retryable=False, kind=kind) from exc
    if entry.pw_uid == 0:
        raise ConnectorError(f"Slurm submit user {user!r} has uid 0", retryable=False, kind=kind)
    path = os.path.join(config["workdir"], user)
    try:
        os.makedirs(config["workdir"], exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid not in (0, entry.pw_uid):
            raise ConnectorError(f"{path} is not a directory of {user} (owner uid {info.st_uid}): remove it",
                                 retryable=False, kind=kind)  # fmt: skip
        os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
        os.chmod(path, 0o700)
    except OSError as exc:
        raise ConnectorError(f"cannot prepare {path} for {user}: {exc}", retryable=False, kind=kind) from exc
    return path
