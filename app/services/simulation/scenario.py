"""What a user may change in a replay, read from JSON or ``--set`` pairs, checked field by field.

A scenario changes the fleet (a region's power budget, its GPUs per hardware type, its PUE; regions removed, or
added as a copy of an existing one, possibly on another stored zone), the objective, or the carbon price. Every bad
field is named by its path (``regions.de.gpus.h100``) in a 422, before anything is stored or replayed.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.errors import FieldError, ValidationFailed
from app.services.fleet import FleetSnapshot

#: The objectives a scenario may ask for (the cost-capped one needs a cap the user cannot set here).
OBJECTIVES = ("cost", "carbon", "weighted")
#: A region's fields a scenario may set.
REGION_FIELDS = ("power_budget_kw", "pue", "gpus", "removed", "like", "zone")
MAX_GPUS = 1_000_000
PUE_RANGE = (1.0, 3.0)


@dataclass(frozen=True, slots=True)
class RegionChange:
    """Changes to one region; ``like`` makes a new region a copy of an existing one."""

    removed: bool = False
    like: str | None = None
    zone: str | None = None
    power_budget_kw: float | None = None  # [kW]
    pue: float | None = None  # [-]
    gpus: Mapping[str, int] = field(default_factory=dict)  # hardware code -> GPUs


@dataclass(frozen=True, slots=True)
class Scenario:
    """A changed fleet, objective or carbon price; the empty scenario is the current settings."""

    objective: str | None = None
    carbon_price_per_tonne: float | None = None  # [currency/tCO2eq]
    regions: Mapping[str, RegionChange] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The scenario as JSON (what ``parse`` reads back)."""
        regions = {}
        for code, c in self.regions.items():
            out: dict[str, Any] = {k: getattr(c, k) for k in ("power_budget_kw", "pue", "like", "zone")
                                   if getattr(c, k) is not None}
            if c.removed:
                out["removed"] = True
            if c.gpus:
                out["gpus"] = dict(c.gpus)
            regions[code] = out
        body: dict[str, Any] = {"objective": self.objective, "carbon_price_per_tonne": self.carbon_price_per_tonne}
        return {**{k: v for k, v in body.items() if v is not None}, "regions": regions}


def _number(errors: list[FieldError], path: str, value: Any, lo: float, hi: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        errors.append(FieldError(path, f"must be a number, got {value!r}"))
        return None
    if not lo <= value <= hi:
        errors.append(FieldError(path, f"must lie in [{lo:g}, {hi:g}], got {value:g}"))
        return None
    return float(value)


def _code(errors: list[FieldError], path: str, value: Any) -> str | None:
    if not isinstance(value, str) or not value or len(value) > 32:
        errors.append(FieldError(path, "must be a code of 1 to 32 characters"))
        return None
    return value


def parse(data: Mapping[str, Any]) -> Scenario:
    """A :class:`Scenario` from JSON (``objective``, ``carbon_price_per_tonne``, ``regions``); 422 naming each bad
    field. Other keys of ``data`` are left to the caller."""
    errors: list[FieldError] = []
    objective = data.get("objective")
    if objective is not None and objective not in OBJECTIVES:
        errors.append(FieldError("objective", f"{objective!r} is not an objective; valid: {', '.join(OBJECTIVES)}"))
        objective = None
    price = data.get("carbon_price_per_tonne")
    if price is not None:
        price = _number(errors, "carbon_price_per_tonne", price, 0.0, 1e6)
    regions: dict[str, RegionChange] = {}
    raw = data.get("regions") or {}
    if not isinstance(raw, Mapping):
        errors.append(FieldError("regions", "must be an object: region code -> changes"))
        raw = {}
    for code, body in raw.items():
        path = f"regions.{code}"
        if _code(errors, path, code) is None:
            continue
        if not isinstance(body, Mapping):
            errors.append(FieldError(path, "must be an object of changes"))
            continue
        for key in body:
            if key not in REGION_FIELDS:
                errors.append(FieldError(f"{path}.{key}", f"unknown field; valid: {', '.join(REGION_FIELDS)}"))
        change: dict[str, Any] = {}
        if "power_budget_kw" in body:
            change["power_budget_kw"] = _number(errors, f"{path}.power_budget_kw", body["power_budget_kw"], 0.0, 1e9)
        if "pue" in body:
            change["pue"] = _number(errors, f"{path}.pue", body["pue"], *PUE_RANGE)
        if "removed" in body:
            if not isinstance(body["removed"], bool):
                errors.append(FieldError(f"{path}.removed", "must be true or false"))
            change["removed"] = body["removed"] is True
        for key in ("like", "zone"):
            if key in body:
                change[key] = _code(errors, f"{path}.{key}", body[key])
        gpus = body.get("gpus", {})
        if not isinstance(gpus, Mapping):
            errors.append(FieldError(f"{path}.gpus", "must be an object: hardware code -> GPUs"))
            gpus = {}
        counts = {}
        for hw, n in gpus.items():
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_GPUS:
                errors.append(FieldError(f"{path}.gpus.{hw}", f"must be a whole number of GPUs in [0, {MAX_GPUS}]"))
            else:
                counts[str(hw)] = n
        regions[code] = RegionChange(gpus=counts, **{k: v for k, v in change.items() if v is not None})
    if errors:
        raise ValidationFailed("invalid scenario", errors)
    return Scenario(objective, price, regions)


def check(scenario: Scenario, fleet: FleetSnapshot, zones: Collection[str]) -> None:
    """Check the scenario against the fleet and the zones whose series are stored; 422 naming each bad field."""
    errors: list[FieldError] = []
    valid_regions = ", ".join(sorted(fleet.regions))
    valid_hw = ", ".join(sorted(fleet.hardware))
    for code, c in scenario.regions.items():
        path = f"regions.{code}"
        if c.like is not None and c.like not in fleet.regions:
            errors.append(FieldError(f"{path}.like", f"unknown region {c.like!r}; valid: {valid_regions}"))
        elif c.like is not None and code in fleet.regions:
            errors.append(FieldError(f"{path}.like", "the region exists already; like= adds a new region"))
        elif c.like is None and code not in fleet.regions:
            errors.append(FieldError(path, f"unknown region; valid: {valid_regions} (add one with like=<region>)"))
        if c.zone is not None and c.zone not in zones:
            errors.append(FieldError(f"{path}.zone", f"no stored series for zone {c.zone!r}; stored: "
                                                     f"{', '.join(sorted(zones)) or 'none'}"))
        for hw in c.gpus:
            if hw not in fleet.hardware:
                errors.append(FieldError(f"{path}.gpus.{hw}", f"unknown hardware type; valid: {valid_hw}"))
    for code, info in fleet.regions.items():  # a region kept on its own zone needs that zone's series
        change = scenario.regions.get(code)
        if (change is None or (not change.removed and change.zone is None)) and info.zone not in zones:
            errors.append(FieldError(f"regions.{code}.zone", f"no stored series for zone {info.zone!r}: remove the "
                                                             "region (removed=true) or move it (zone=<zone>)"))
    kept = (set(fleet.regions) | {c for c, ch in scenario.regions.items() if ch.like}) - {
        c for c, ch in scenario.regions.items() if ch.removed}
    if not kept:
        errors.append(FieldError("regions", "the scenario removes every region"))
    if errors:
        raise ValidationFailed("invalid scenario", errors)


def apply(scenario: Scenario, fleet: FleetSnapshot) -> FleetSnapshot:
    """The fleet with the scenario's changes (checked with :func:`check` first)."""
    regions = dict(fleet.regions)
    for code, c in scenario.regions.items():
        if c.removed:
            regions.pop(code, None)
            continue
        base = regions[code] if c.like is None else replace(fleet.regions[c.like], code=code)
        inventory = {**base.inventory, **c.gpus}
        regions[code] = replace(
            base, zone=c.zone or base.zone, pue=base.pue if c.pue is None else c.pue,
            power_budget_kw=base.power_budget_kw if c.power_budget_kw is None else c.power_budget_kw,
            inventory={hw: n for hw, n in inventory.items() if n > 0},
        )
    return replace(fleet, regions=dict(sorted(regions.items())))


def from_pairs(pairs: list[str]) -> dict[str, Any]:
    """``--set`` pairs (``region.de.gpus.h100=8``, ``regions.fi.removed=true``, ``objective=carbon``,
    ``carbon_price=120``) as the JSON :func:`parse` reads; a malformed pair is a 422 naming it."""
    out: dict[str, Any] = {}
    errors: list[FieldError] = []
    for pair in pairs:
        key, sep, text = pair.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            errors.append(FieldError(pair, "expected KEY=VALUE, e.g. region.de.gpus.h100=8"))
            continue
        value: Any = _value(text.strip())
        if parts[0] in ("region", "regions") and len(parts) >= 3:
            region = out.setdefault("regions", {}).setdefault(parts[1], {})
            if parts[2] == "gpus" and len(parts) == 4:
                region.setdefault("gpus", {})[parts[3]] = value
            elif len(parts) == 3:
                region[{"budget_kw": "power_budget_kw"}.get(parts[2], parts[2])] = value
            else:
                errors.append(FieldError(key, "expected region.<code>.<field> or region.<code>.gpus.<hardware>"))
        elif len(parts) == 1 and parts[0] in ("objective", "carbon_price", "carbon_price_per_tonne"):
            out["carbon_price_per_tonne" if parts[0].startswith("carbon") else "objective"] = value
        else:
            errors.append(FieldError(key, "unknown setting; valid: region.<code>.power_budget_kw|pue|removed|like|"
                                          "zone, region.<code>.gpus.<hardware>, objective, carbon_price"))
    if errors:
        raise ValidationFailed("invalid --set", errors)
    return out


def _value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
