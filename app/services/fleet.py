"""The fleet: regions, power budgets, hardware types, inventory, clusters; and a read-only snapshot of it."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.enums import WorkloadClass
from app.errors import Conflict, FieldError, NotFound, ValidationFailed
from app.models import Cluster, HardwareType, Inventory, JobProfile, PowerBudgetOverride, Region, Tenant
from app.services import power

REFERENCE_HARDWARE = "h100"


@dataclass(frozen=True, slots=True)
class HardwareInfo:
    code: str
    vendor: str
    memory_gb: float
    tdp_w: float
    idle_w: float
    relative_throughput: dict[str, float]


@dataclass(frozen=True, slots=True)
class RegionInfo:
    code: str
    zone: str
    pue: float
    power_budget_kw: float
    residency_tags: frozenset[str]
    inventory: dict[str, int]  # hardware code -> GPUs


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    relative_throughput: float  # x reference hardware for this workload class
    power_w: float  # average draw per GPU [W]


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """What validation and planning need to know about the fleet, read once per request or plan."""

    regions: dict[str, RegionInfo]
    hardware: dict[str, HardwareInfo]
    profiles: dict[tuple[str, str], ProfileInfo] = field(default_factory=dict)  # (class, hw) -> profile

    def throughput(self, hw: str, workload_class: str) -> float:
        """Relative throughput of ``hw`` for a workload class [x reference hardware]."""
        prof = self.profiles.get((workload_class, hw))
        if prof is not None:
            return prof.relative_throughput
        info = self.hardware[hw]
        return float(info.relative_throughput.get(workload_class, info.relative_throughput.get("default", 1.0)))

    def power_w(self, hw: str, workload_class: str) -> float:
        """Average draw of one GPU of ``hw`` running this workload class [W]."""
        prof = self.profiles.get((workload_class, hw))
        if prof is not None:
            return prof.power_w
        info = self.hardware[hw]
        return power.gpu_power_w(info.idle_w, info.tdp_w, power.default_utilisation(workload_class))


def snapshot(session: Session) -> FleetSnapshot:
    """The fleet as validation and planning see it, read with plain column queries (every batch submission reads it)."""
    h, r, i = HardwareType, Region, Inventory
    hardware: dict[str, HardwareInfo] = {}
    codes: dict[int, str] = {}
    for row in session.execute(select(h.id, h.code, h.vendor, h.memory_gb, h.tdp_w, h.idle_w, h.relative_throughput)):
        codes[row.id] = row.code
        hardware[row.code] = HardwareInfo(
            row.code, row.vendor, row.memory_gb, row.tdp_w, row.idle_w, dict(row.relative_throughput or {})
        )
    inventory: dict[int, dict[str, int]] = {}
    for row in session.execute(select(i.region_id, i.hardware_type_id, i.gpu_count).where(i.gpu_count > 0).order_by(i.id)):
        inventory.setdefault(row.region_id, {})[codes[row.hardware_type_id]] = row.gpu_count
    regions: dict[str, RegionInfo] = {}
    for row in session.execute(select(r.id, r.code, r.zone, r.pue, r.power_budget_kw, r.residency_tags)):
        regions[row.code] = RegionInfo(
            row.code, row.zone, row.pue, row.power_budget_kw, frozenset(row.residency_tags or []),
            inventory.get(row.id, {}),
        )
    profiles: dict[tuple[str, str], ProfileInfo] = {}
    rows = session.execute(
        select(JobProfile, HardwareType.code)
        .join(HardwareType, JobProfile.hardware_type_id == HardwareType.id)
        .where(JobProfile.active.is_(True), JobProfile.job_id.is_(None))
        .order_by(JobProfile.id)
    )
    for prof, code in rows:
        if prof.workload_class:
            profiles[(prof.workload_class, code)] = ProfileInfo(prof.relative_throughput, prof.power_w)
    return FleetSnapshot(regions, hardware, profiles)


# --- administration (operator tenants only; the API checks the role) -------------------------------------

REGION_FIELDS = ("name", "zone", "timezone", "currency", "pue", "power_budget_kw", "residency_tags")


def lowest_budget_kw(base_kw: float, overrides: Iterable[tuple[datetime, datetime, float]], start: datetime,
                     end: datetime) -> float:
    """The lowest power budget in force at any moment of [start, end) [kW].

    Each override ``(start_at, end_at, power_kw)`` sets the budget over its own half-open window, the lowest one
    wins where they overlap, and the region's ``base_kw`` holds wherever none does.
    """
    windows = sorted((max(s, start), min(e, end), kw) for s, e, kw in overrides if s < end and e > start)
    if not windows:
        return base_kw
    lowest = min(kw for _s, _e, kw in windows)
    covered_to = start
    for s, e, _kw in windows:
        if s > covered_to:  # a gap: the region's own budget holds there
            return min(lowest, base_kw)
        covered_to = max(covered_to, e)
    return lowest if covered_to >= end else min(lowest, base_kw)


def get_region(session: Session, code: str) -> Region:
    region = session.scalar(select(Region).where(Region.code == code))
    if region is None:
        known = ", ".join(session.scalars(select(Region.code).order_by(Region.code))) or "none"
        raise NotFound(f"region {code!r} (known: {known})")
    return region


def region_details(session: Session, code: str) -> Region:
    """A region with its power-budget overrides and inventory loaded; NotFound lists the known codes."""
    get_region(session, code)
    return session.scalars(
        select(Region).where(Region.code == code).options(
            selectinload(Region.overrides), selectinload(Region.inventory).selectinload(Inventory.hardware_type)
        )
    ).one()


def regions_json(session: Session) -> list[dict[str, Any]]:
    """Every region as the API's ``RegionOut`` document, read with three plain queries and built directly.

    The region list is read by every dashboard page and by clients before they submit; through the ORM's
    relationship loaders and marshmallow it cost about 4 ms of CPU per request, this about a third of it.
    tests/app/test_fleet_api.py checks that both give the same document.
    """
    r, o, i = Region, PowerBudgetOverride, Inventory
    overrides: dict[int, list[dict[str, Any]]] = {}
    for row in session.execute(select(o.region_id, o.id, o.start_at, o.end_at, o.power_kw, o.reason).order_by(o.start_at)):
        overrides.setdefault(row.region_id, []).append({
            "id": row.id, "start_at": row.start_at.isoformat(), "end_at": row.end_at.isoformat(),
            "power_kw": float(row.power_kw), "reason": row.reason,
        })
    inventory: dict[int, list[dict[str, Any]]] = {}
    for inv in session.execute(
        select(i.region_id, HardwareType.code, i.gpu_count).join(HardwareType, HardwareType.id == i.hardware_type_id)
        .order_by(i.id)
    ):
        inventory.setdefault(inv.region_id, []).append({"hardware": inv.code, "gpu_count": inv.gpu_count})
    rows = session.execute(
        select(r.id, r.name, r.zone, r.timezone, r.currency, r.pue, r.power_budget_kw, r.residency_tags, r.code)
        .order_by(r.code)
    )
    return [
        {
            "name": row.name, "zone": row.zone, "timezone": row.timezone, "currency": row.currency,
            "pue": float(row.pue), "power_budget_kw": float(row.power_budget_kw),
            "residency_tags": [str(t) for t in row.residency_tags or []], "code": row.code,
            "overrides": overrides.get(row.id, []), "inventory": inventory.get(row.id, []),
        }
        for row in rows
    ]


def list_hardware(session: Session) -> list[HardwareType]:
    """Every hardware type, by code."""
    return list(session.scalars(select(HardwareType).order_by(HardwareType.code)))


def list_clusters(session: Session) -> list[Cluster]:
    """Every cluster, by name."""
    return list(session.scalars(select(Cluster).order_by(Cluster.name)))


def find_cluster(session: Session, name: str) -> Cluster | None:
    """The cluster called ``name``, or None."""
    return session.scalar(select(Cluster).where(Cluster.name == name))


def upsert_region(session: Session, code: str, values: dict[str, Any], *,
                  currencies: Collection[str] | None = None) -> Region:
    """Create or update a region. ``currencies`` (the reporting currency and those with an exchange rate), when
    given, refuses any other for a new region or a changed currency: the planner cannot price such a region, and
    every plan of the fleet fails while one exists."""
    region = session.scalar(select(Region).where(Region.code == code))
    if region is None and ("power_budget_kw" not in values or "zone" not in values):
        raise ValidationFailed(
            "a new region needs a zone and a power budget",
            [FieldError(f, "required") for f in ("zone", "power_budget_kw") if f not in values],
        )
    if currencies is not None and (region is None or "currency" in values):
        currency = values.get("currency") or (region.currency if region is not None else None) or "EUR"
        if currency not in currencies:
            raise ValidationFailed("no exchange rate for the region's currency", [FieldError(
                "currency", f"{currency} prices need a rate in GRIDSHIFT_FX_RATES ({currency}=<rate>); known: "
                f"{', '.join(sorted(currencies))}")])
    if region is None:
        region = Region(code=code, name=values.get("name", code))
        session.add(region)
    for key in REGION_FIELDS:
        if key in values:
            setattr(region, key, values[key])
    _check_region(region)
    session.flush()
    return region


def _check_region(region: Region) -> None:
    errors = []
    if region.pue is not None and not 1.0 <= region.pue <= 3.0:
        errors.append(FieldError("pue", "must be between 1.0 and 3.0"))
    if region.power_budget_kw is not None and region.power_budget_kw <= 0:
        errors.append(FieldError("power_budget_kw", "must be positive"))
    if errors:
        raise ValidationFailed("bad region", errors)


def add_override(
    session: Session, code: str, start_at: datetime, end_at: datetime, power_kw: float, reason: str = ""
) -> PowerBudgetOverride:
    if end_at <= start_at:
        raise ValidationFailed("bad override", [FieldError("end_at", "must be after start_at")])
    if power_kw < 0:
        raise ValidationFailed("bad override", [FieldError("power_kw", "must not be negative")])
    region = get_region(session, code)
    row = PowerBudgetOverride(region=region, start_at=start_at, end_at=end_at, power_kw=power_kw, reason=reason)
    session.add(row)
    session.flush()
    return row


HARDWARE_FIELDS = (
    "vendor", "model", "memory_gb", "memory_bandwidth_gbs", "bf16_tflops", "tdp_w", "idle_w",
    "resource_name", "relative_throughput", "sources",
)


def get_hardware(session: Session, code: str) -> HardwareType:
    hw = session.scalar(select(HardwareType).where(HardwareType.code == code))
    if hw is None:
        known = ", ".join(session.scalars(select(HardwareType.code).order_by(HardwareType.code))) or "none"
        raise NotFound(f"hardware type {code!r} (known: {known})")
    return hw


def upsert_hardware(session: Session, code: str, values: dict[str, Any]) -> HardwareType:
    hw = session.scalar(select(HardwareType).where(HardwareType.code == code))
    if hw is None:
        missing = [f for f in ("vendor", "model", "memory_gb", "tdp_w", "idle_w") if f not in values]
        if missing:
            raise ValidationFailed("a new hardware type needs these fields", [FieldError(f, "required") for f in missing])
        hw = HardwareType(code=code)
        session.add(hw)
    for key in HARDWARE_FIELDS:
        if key in values:
            setattr(hw, key, values[key])
    errors = []
    for key in ("memory_gb", "tdp_w"):
        if getattr(hw, key) is None or getattr(hw, key) <= 0:
            errors.append(FieldError(key, "must be positive"))
    if hw.idle_w is None or hw.idle_w < 0 or (hw.tdp_w and hw.idle_w >= hw.tdp_w):
        errors.append(FieldError("idle_w", "must be non-negative and below tdp_w"))
    for cls, value in (hw.relative_throughput or {}).items():
        if cls != "default" and cls not in {w.value for w in WorkloadClass}:
            errors.append(FieldError(f"relative_throughput.{cls}", "unknown workload class"))
        elif not isinstance(value, int | float) or value <= 0:
            errors.append(FieldError(f"relative_throughput.{cls}", "must be a positive number"))
    if errors:
        raise ValidationFailed("bad hardware type", errors)
    session.flush()
    return hw


def set_inventory(session: Session, region_code: str, hw_code: str, gpu_count: int) -> Inventory:
    if gpu_count < 0:
        raise ValidationFailed("bad inventory", [FieldError("gpu_count", "must not be negative")])
    region = get_region(session, region_code)
    hw = get_hardware(session, hw_code)
    row = session.scalar(
        select(Inventory).where(Inventory.region_id == region.id, Inventory.hardware_type_id == hw.id)
    )
    if row is None:
        row = Inventory(region=region, hardware_type=hw, gpu_count=gpu_count)
        session.add(row)
    row.gpu_count = gpu_count
    session.flush()
    return row


def upsert_cluster(
    session: Session, name: str, region_code: str, kind: str, config: dict[str, Any], enabled: bool = True,
    *, secrets: dict[str, Any] | None = None, keys: tuple[str, ...] = (),
) -> Cluster:
    """Create or update a cluster. ``secrets`` (credentials) are stored encrypted with ``keys``; None keeps the
    stored ones, ``{}`` clears them. The connector's schema is checked against config and credentials together,
    so a required credential (a Slurm REST token, say) may live only in the encrypted part."""
    from connectors.base import ConfigError
    from connectors.registry import credential_fields, get_connector

    misplaced = credential_fields(kind, config)
    if misplaced:
        raise ValidationFailed("credentials in a cluster's config", [FieldError(
            f"config.{key}", "holds a credential: send it under 'secrets' (stored encrypted, never returned)")
            for key in misplaced])  # fmt: skip
    row = session.scalar(select(Cluster).where(Cluster.name == name))
    stored = cluster_secrets(row, keys) if row is not None else {}
    effective = stored if secrets is None else secrets
    try:
        get_connector(kind, {**config, **effective})  # validates against the kind's JSON schema
    except ConfigError as exc:
        field_name = exc.field if exc.field.startswith(("kind", "config")) else f"config.{exc.field}".rstrip(".")
        if exc.field.removeprefix("config.").split(".")[0] in effective:
            field_name = "secrets." + exc.field.removeprefix("config.")
        raise ValidationFailed("bad cluster", [FieldError(field_name, str(exc))]) from exc
    bound = config.get("tenant")  # a cluster bound to one tenant (its trust domain): that tenant must exist
    if bound and session.scalar(select(Tenant.id).where(Tenant.slug == bound)) is None:
        raise ValidationFailed("bad cluster", [FieldError("config.tenant", f"no tenant {bound!r}")])
    region = get_region(session, region_code)
    if row is None:
        row = Cluster(name=name, region=region, kind=kind, config=config, enabled=enabled)
        session.add(row)
    elif row.region_id != region.id and row.kind != kind:
        raise Conflict(f"cluster {name!r} exists in another region with another kind")
    row.region, row.kind, row.config, row.enabled = region, kind, config, enabled
    session.flush()
    if secrets is not None:
        set_cluster_secrets(session, name, secrets, keys)
    return row


# --- connector credentials, encrypted at rest (app/crypto.py) -------------------------------------------


def set_cluster_secrets(session: Session, name: str, secrets: dict[str, Any] | None, keys: tuple[str, ...]) -> Cluster:
    """Store a cluster's credentials encrypted with the newest key; ``{}`` or None clears them."""
    from app import crypto

    row = session.scalar(select(Cluster).where(Cluster.name == name))
    if row is None:
        raise NotFound(f"cluster {name!r}")
    row.secrets_encrypted = crypto.encrypt_json(keys, secrets) if secrets else None
    session.flush()
    return row


def cluster_secrets(cluster: Cluster, keys: tuple[str, ...]) -> dict[str, Any]:
    """A cluster's decrypted credentials (``{}`` when it has none), for building its connector."""
    from app import crypto

    return crypto.decrypt_json(keys, cluster.secrets_encrypted) if cluster.secrets_encrypted else {}
