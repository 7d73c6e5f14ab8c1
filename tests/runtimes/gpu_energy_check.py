"""Run a real PyTorch training job through the local connector on this host's NVIDIA GPU and report energy.

Checks the NVML meter end to end on real hardware: the connector detects the GPU type through NVML, pins
the job with CUDA_VISIBLE_DEVICES, and its supervisor meters the total-energy counter; this script samples
``nvmlDeviceGetPowerUsage`` on its own, independently, and integrates it for comparison.

Usage (on a GPU machine, from the repository root)::

    python3 tests/runtimes/gpu_energy_check.py --seconds 60 [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from connectors import JobSpec, RunStatus, get_connector
from connectors.local import LocalConnector

TRAIN = """
import time, torch
torch.manual_seed(0)
dev = torch.device("cuda")
d = 8192
model = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)).to(dev, torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(8192, d, device=dev, dtype=torch.bfloat16)
y = torch.randn(8192, d, device=dev, dtype=torch.bfloat16)
end, steps = time.monotonic() + SECONDS, 0
while time.monotonic() < end:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    steps += 1
    if steps % 20 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
flops = 6 * 2 * d * 4 * d * 8192 * steps
print(f"device={torch.cuda.get_device_name(0)} steps={steps} loss={loss.item():.4f} tflops={flops / SECONDS / 1e12:.0f}")
"""


def sample_power(stop: threading.Event, samples: list[tuple[float, float]]) -> None:
    """Independent reference: GPU 0 power [W] every 0.2 s."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    while not stop.wait(0.2):
        samples.append((time.time(), pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    state_dir = Path(tempfile.mkdtemp(prefix="gs-gpu-check-"))
    connector = get_connector("local", {"state_dir": str(state_dir), "meter_interval_s": 1.0})
    assert isinstance(connector, LocalConnector)
    capacity = connector.capacity()
    hardware = next(iter(capacity.gpus_total), None)
    if hardware is None:
        print("no NVIDIA GPU found through NVML", file=sys.stderr)
        return 2
    script = state_dir / "train.py"
    script.write_text(TRAIN.replace("SECONDS", str(args.seconds)))
    spec = JobSpec(run_key="gs-gpu-check", name="bf16 MLP training", command=f"{sys.executable} {script}",
                   hardware=hardware, gpu_count=1, power_w_per_gpu=700.0, time_limit_minutes=10)  # fmt: skip
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_power, args=(stop, samples), daemon=True)
    sampler.start()
    job_id = connector.submit(spec)
    while not (state := connector.poll(job_id)).status.terminal:
        time.sleep(0.5)
    stop.set()
    sampler.join()
    reading = connector.energy(job_id)
    assert state.started_at is not None and state.finished_at is not None
    run_s = (state.finished_at - state.started_at).total_seconds()
    # trapezoid over the samples taken while the job ran
    inside = [
        (t, p) for t, p in samples if state.started_at.timestamp() <= t <= state.finished_at.timestamp()
    ]
    joules = sum((t2 - t1) * (p1 + p2) / 2 for (t1, p1), (t2, p2) in itertools.pairwise(inside))
    window_s = inside[-1][0] - inside[0][0] if len(inside) > 1 else 0.0
    result = {
        "hardware": hardware,
        "gpus_total": dict(capacity.gpus_total),
        "status": str(state.status),
        "exit_code": state.exit_code,
        "run_s": round(run_s, 1),
        "energy_source": str(reading.source) if reading else None,
        "energy_kwh": round(reading.energy_kwh, 6) if reading else None,
        "avg_power_w": round(reading.avg_power_w, 1) if reading else None,
        "reference_avg_power_w": round(joules / window_s, 1) if window_s else None,
        "reference_energy_kwh": round(joules / 3.6e6 * run_s / window_s, 6) if window_s else None,
        "reference_window_s": round(window_s, 1),
        "log": connector.log_path(job_id).read_text()[-400:].strip(),
    }
    print(f"{'field':24} value")
    for key, value in result.items():
        print(f"{key:24} {value}")
    if args.json:
        print(json.dumps(result))
    return 0 if state.status is RunStatus.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
