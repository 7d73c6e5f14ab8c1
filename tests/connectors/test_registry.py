"""Registry lookups, config validation and JobSpec checks: errors name the kind or field at fault."""

from __future__ import annotations

from datetime import datetime

import pytest

from connectors import ConfigError, JobSpec, available_kinds, get_connector, known_kinds, register, registry
from connectors.base import estimate_energy, vendor_of
from connectors.registry import validate_config


def test_builtin_kinds_are_registered() -> None:
    assert {"local", "slurm", "ray", "kubernetes"} <= set(known_kinds())
    assert "local" in available_kinds()


def test_unknown_kind_lists_the_known_kinds() -> None:
    with pytest.raises(ConfigError) as info:
        get_connector("nomad", {})
    message = str(info.value)
    assert "nomad" in message
    for kind in ("local", "slurm", "ray", "kubernetes"):
        assert kind in message
    assert info.value.field == "kind"
    assert info.value.retryable is False


def test_invalid_config_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        get_connector("slurm", {"mode": "grpc"})
    assert info.value.field == "config.mode"
    with pytest.raises(ConfigError) as info:
        get_connector("local", {"gpus": {"h100": [0, "one"]}})
    assert info.value.field == "config.gpus.h100[1]"
    with pytest.raises(ConfigError) as info:
        get_connector("ray", {})
    assert info.value.field == "config.address"
    with pytest.raises(ConfigError) as info:
        get_connector("local", {"state_dirr": "/tmp/x"})
    assert info.value.field == "config.state_dirr"
    assert "state_dir" in str(info.value)  # lists the allowed fields


def test_rest_mode_requires_url_user_and_token() -> None:
    with pytest.raises(ConfigError) as info:
        get_connector("slurm", {"mode": "rest", "rest_url": "http://127.0.0.1:1"})
    assert info.value.field == "config.rest_user"


def test_defaults_are_filled_in() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "default": 3}}}
    assert validate_config(schema, {}) == {"n": 3}
    with pytest.raises(ConfigError, match="below the minimum"):
        validate_config(schema, {"n": 0})
    with pytest.raises(ConfigError, match="expected integer"):
        validate_config(schema, {"n": True})


def test_a_kind_whose_sdk_is_missing_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    known_kinds()  # load the built-ins before the registry is swapped for a copy
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @register
    class Absent:
        kind = "absent-sdk-test"
        config_schema: dict = {"type": "object"}

        @classmethod
        def enabled(cls) -> bool:
            return False

    assert "absent-sdk-test" in known_kinds()
    assert "absent-sdk-test" not in available_kinds()
    with pytest.raises(ConfigError, match="not available here"):
        get_connector("absent-sdk-test", {})


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"run_key": "GS_Run 1"}, "run_key"),
        ({"run_key": "x" * 64}, "run_key"),
        ({"gpu_count": -1}, "gpu_count"),
        ({"time_limit_minutes": 0}, "time_limit_minutes"),
        ({"begin_at": datetime(2030, 1, 1)}, "begin_at"),
        ({"command": None}, "command"),
        ({"power_w_per_gpu": -5.0}, "power_w_per_gpu"),
        ({"env": {"A": 1}}, "env.A"),
    ],
)
def test_jobspec_rejects_bad_values_naming_the_field(changes: dict, field: str) -> None:
    values = {"run_key": "gs-run-1", "name": "n", "command": "true", "hardware": "h100"} | changes
    with pytest.raises(ConfigError) as info:
        JobSpec(**values)
    assert info.value.field == field


def test_vendor_of_known_and_unknown_hardware() -> None:
    assert vendor_of("H100") == "nvidia"
    assert vendor_of("mi300x") == "amd"
    assert vendor_of("ascend910b") == "huawei"
    assert vendor_of("gaudi3", {"gaudi3": "intel"}) == "intel"
    with pytest.raises(ConfigError, match=r"known: .*h100"):
        vendor_of("tpu-v5")


def test_estimate_energy_is_power_times_gpus_times_time() -> None:
    start = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    end = datetime.fromisoformat("2026-01-01T02:00:00+00:00")
    reading = estimate_energy(700.0, 4, start, end)
    assert reading is not None
    assert reading.energy_kwh == pytest.approx(5.6)  # 2.8 kW for 2 h
    assert reading.avg_power_w == 2800.0
    assert estimate_energy(700.0, 4, None, end) is None
