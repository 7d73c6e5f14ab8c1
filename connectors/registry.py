"""Registry of connector kinds: ``register(cls)`` a class, build one with ``get_connector(kind, config)``.

One way in: the built-in connectors are listed in :data:`BUILTINS` and registered here on first use, and any other
connector is added by calling :func:`register` with its class (it also works as a class decorator). Importing a
connector module registers nothing. A kind whose optional SDK is missing stays known (so an error can say what to
install) but cannot be built: its ``enabled()`` says so.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from connectors.base import ClusterConnector, ConfigError, serves_tenant

__all__ = ["available_kinds", "credential_fields", "get_connector", "known_kinds", "register", "validate_config"]

#: Config names that hold credentials in any connector (a schema may mark more with ``"secret": true``).
_CREDENTIAL_WORDS = ("token", "password", "passwd", "secret", "private_key", "api_key", "credential")

_REGISTRY: dict[str, type[Any]] = {}

C = TypeVar("C", bound=type)

_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, list | tuple),
    "null": lambda v: v is None,
}


def register(cls: C) -> C:
    """Class decorator adding a connector to the registry under ``cls.kind``."""
    kind = getattr(cls, "kind", None)
    if not kind or not isinstance(getattr(cls, "config_schema", None), dict):
        raise TypeError(f"{cls.__name__} needs class attributes 'kind' and 'config_schema' to be registered")
    _REGISTRY[kind] = cls
    return cls


def known_kinds() -> list[str]:
    """Every registered kind, sorted, whether or not its SDK is installed."""
    _load_builtins()
    return sorted(_REGISTRY)


def available_kinds() -> list[str]:
    """Registered kinds whose optional SDK or CLI is present here."""
    _load_builtins()
    return sorted(kind for kind, cls in _REGISTRY.items() if cls.enabled())


def get_connector(kind: str, config: Mapping[str, Any] | None = None) -> ClusterConnector:
    """Build the connector of ``kind`` from a cluster config.

    Parameters
    ----------
    kind : str
        ``local``, ``slurm``, ``ray``, ``kubernetes`` or any registered kind.
    config : Mapping, optional
        Cluster config; checked against the kind's ``config_schema``, defaults filled in.

    Raises
    ------
    ConfigError
        Unknown kind (the message lists the known kinds), missing SDK, or an invalid config entry
        (``field`` names it).
    """
    _load_builtins()
    try:
        cls = _REGISTRY[kind]
    except KeyError:
        raise ConfigError(
            f"unknown connector kind {kind!r}; known kinds: {', '.join(sorted(_REGISTRY))}", field="kind"
        ) from None
    # The config is checked first: a wrong field is named whether or not this machine has the kind's SDK.
    checked = validate_config(cls.config_schema, config or {}, kind=kind)
    if not cls.enabled():
        raise ConfigError(
            f"connector kind {kind!r} is not available here: its SDK or CLI is missing "
            "(install the runtimes extra: `make runtimes`, or pip install 'gridshift[runtimes]'; "
            "or the runtime's client tools)",
            field="kind",
            kind=kind,
        )
    return cls(checked)


def accepts_tenant(kind: str, config: Mapping[str, Any], tenant: str | None) -> bool:
    """True when a cluster of ``kind`` with ``config`` would run ``tenant``'s jobs: not bound to another tenant
    (:func:`~connectors.base.serves_tenant`), and, for kinds whose jobs can see each other's environment
    (class attribute ``unbound_needs_consent``, e.g. Ray), bound to this tenant or ``shared_between_tenants``.
    Dispatch asks this before it picks a cluster, so no run is sent where the connector would refuse it."""
    _load_builtins()
    if not serves_tenant(config, tenant):
        return False
    cls = _REGISTRY.get(kind)
    if tenant is None or config.get("tenant") or not getattr(cls, "unbound_needs_consent", False):
        return True
    return bool(config.get("shared_between_tenants", False))


def credential_fields(kind: str, config: Mapping[str, Any]) -> list[str]:
    """Top-level entries of ``config`` that hold credentials: marked ``"secret": true`` in the kind's schema, or
    named like one (``*token*``, ``*password*``, ``*secret*``, ``*private_key*``, ...). They belong in a cluster's
    encrypted ``secrets``, never in its ``config`` (which is stored and returned in clear)."""
    _load_builtins()
    cls = _REGISTRY.get(kind)
    properties = cls.config_schema.get("properties", {}) if cls is not None else {}
    return sorted(
        name for name in config
        if (properties.get(name) or {}).get("secret") or any(w in name.lower() for w in _CREDENTIAL_WORDS)
    )  # fmt: skip


def validate_config(
    schema: Mapping[str, Any], config: Mapping[str, Any], *, kind: str | None = None, path: str = ""
) -> dict[str, Any]:
    """Check ``config`` against a JSON schema subset and return a copy with defaults filled in.

    Supports ``type``, ``properties``, ``required``, ``additionalProperties`` (bool or schema), ``enum``,
    ``minimum``, ``maximum``, ``items`` and ``default``.

    Raises
    ------
    ConfigError
        Naming the first offending field as a dotted path.
    """
    value = _check(schema, config, path or "config", kind)
    return dict(value)


def _check(schema: Mapping[str, Any], value: Any, path: str, kind: str | None) -> Any:
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_JSON_TYPES[name](value) for name in names):
            raise ConfigError(f"{path}: expected {' or '.join(names)}, got {value!r}", field=path, kind=kind)
    if "enum" in schema and value not in schema["enum"]:
        raise ConfigError(f"{path}: {value!r} is not one of {schema['enum']}", field=path, kind=kind)
    if "minimum" in schema and _JSON_TYPES["number"](value) and value < schema["minimum"]:
        raise ConfigError(
            f"{path}: {value!r} is below the minimum {schema['minimum']}", field=path, kind=kind
        )
    if "maximum" in schema and _JSON_TYPES["number"](value) and value > schema["maximum"]:
        raise ConfigError(
            f"{path}: {value!r} is above the maximum {schema['maximum']}", field=path, kind=kind
        )
    if isinstance(value, Mapping):
        return _check_object(schema, value, path, kind)
    if isinstance(value, list | tuple) and "items" in schema:
        return [_check(schema["items"], item, f"{path}[{i}]", kind) for i, item in enumerate(value)]
    return value


def _check_object(schema: Mapping[str, Any], value: Mapping[str, Any], path: str, kind: str | None) -> dict:
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            raise ConfigError(f"{path}.{name}: required field is missing", field=f"{path}.{name}", kind=kind)
    extra = schema.get("additionalProperties", True)
    out: dict[str, Any] = {}
    for name, item in value.items():
        sub = f"{path}.{name}"
        if name in properties:
            out[name] = _check(properties[name], item, sub, kind)
        elif extra is False:
            allowed = ", ".join(sorted(properties)) or "none"
            raise ConfigError(f"{sub}: unknown field (allowed: {allowed})", field=sub, kind=kind)
        elif isinstance(extra, Mapping):
            out[name] = _check(extra, item, sub, kind)
        else:
            out[name] = item
    for name, prop in properties.items():
        if name not in out and "default" in prop:
            out[name] = prop["default"]
    return out


#: The built-in connectors, kind -> ``module:Class``; none imports its SDK at import time.
BUILTINS: dict[str, str] = {
    "local": "connectors.local:LocalConnector",
    "slurm": "connectors.slurm:SlurmConnector",
    "ray": "connectors.ray:RayConnector",
    "kubernetes": "connectors.kubernetes:KubernetesConnector",
}
_loaded = False


def _load_builtins() -> None:
    """Register the built-in connectors (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for target in BUILTINS.values():
        module_name, class_name = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:  # a built-in module not shipped in this build
            if exc.name != module_name:
                raise
            continue
        register(getattr(module, class_name))
