"""GPU power model: idle plus utilisation-dependent dynamic power; the region's PUE applies on top.

P_gpu(u) = P_idle + u * (P_tdp - P_idle), u in [0, 1]; facility power = PUE * sum of GPU power.
The default utilisations per workload class are planning assumptions until a profile is measured.
"""

from __future__ import annotations

# Assumed mean utilisation of the power headroom per workload class (replaced by measured profiles).
DEFAULT_UTILISATION = {
    "training": 0.85,
    "fine_tuning": 0.8,
    "rendering": 0.75,
    "batch_inference": 0.55,
}


def default_utilisation(workload_class: str) -> float:
    return DEFAULT_UTILISATION.get(workload_class, 0.8)


def gpu_power_w(idle_w: float, tdp_w: float, utilisation: float) -> float:
    """Average power of one GPU [W] at ``utilisation`` of its dynamic range."""
    u = min(max(utilisation, 0.0), 1.0)
    return idle_w + u * (tdp_w - idle_w)


def facility_energy_kwh(gpu_count: int, power_w_per_gpu: float, hours: float, pue: float) -> float:
    """Energy drawn from the grid [kWh] for ``gpu_count`` GPUs over ``hours`` in a site with ``pue``."""
    return gpu_count * power_w_per_gpu * hours * pue / 1000.0
