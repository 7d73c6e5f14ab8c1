"""Three GPU workload shapes in PyTorch, each a loop of identical steps, for profiling and prediction checks.

Shapes
------
``training``
    One training step of a decoder-only transformer in bf16 autocast (causal flash attention, fused AdamW):
    compute-bound, the shape of the *training* and *fine_tuning* classes.
``rendering``
    A tile loop of large bf16 matrix products with a shading non-linearity and accumulation into a frame
    buffer: matmul-heavy, the shape of the *rendering* class.
``decode``
    Batch-1 autoregressive decoding through a stack of large layers (matrix-vector products plus attention
    over a KV cache): memory-bound, the shape of the *batch_inference* class.

Usage (run as a job, e.g. through the local connector)::

    python bench/gpu_workloads.py calibrate --shape training --steps 200 --min-seconds 8
    python bench/gpu_workloads.py run --shape decode --steps 20000

Both modes run ``--warmup`` steps first (kernel selection, allocator growth), then the timed steps, and print
one line ``GRIDSHIFT_RESULT {json}`` with steps, seconds, steps/s and, where NVML is present, the energy of the
timed window from the GPU's total-energy counter [J], energy per step [J] and mean power [W]. Without CUDA the
shapes run on the CPU at tiny sizes (``--size tiny`` is then the default), which is what the CPU tests use.
This file needs only PyTorch (and nvidia-ml-py for energy); it imports nothing from the project.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RESULT_PREFIX = "GRIDSHIFT_RESULT "
SHAPES = ("training", "rendering", "decode")
_T0 = time.monotonic()  # process start, for the setup time


@dataclass(frozen=True, slots=True)
class Sizes:
    """Problem sizes of the three shapes."""

    # training: GPT-like decoder
    d_model: int
    n_heads: int
    n_layers: int
    seq_len: int
    batch: int
    vocab: int
    # rendering: pixels x features, passes per step
    pixels: int
    features: int
    passes: int
    # decode: model width, layers, KV-cache length
    dec_d: int
    dec_layers: int
    dec_ctx: int


FULL = Sizes(d_model=2048, n_heads=16, n_layers=8, seq_len=2048, batch=4, vocab=32000,
             pixels=16384, features=4096, passes=8, dec_d=8192, dec_layers=16, dec_ctx=4096)  # fmt: skip
TINY = Sizes(d_model=64, n_heads=4, n_layers=2, seq_len=32, batch=2, vocab=128,
             pixels=128, features=64, passes=2, dec_d=128, dec_layers=2, dec_ctx=32)  # fmt: skip


# -- energy ---------------------------------------------------------------------------------------------------
class EnergyCounter:
    """NVML total-energy counter of the GPU this process sees (CUDA_VISIBLE_DEVICES' first entry) [mJ]."""

    def __init__(self) -> None:
        self.handle: Any = None
        self.nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
            index = int(visible) if visible.isdigit() else 0
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.nvml = pynvml
        except Exception:  # no driver, no such device, or counter unsupported
            self.handle = None

    @property
    def available(self) -> bool:
        return self.handle is not None

    def read_j(self) -> float | None:
        """Energy the GPU used since the driver loaded [J], or None without NVML."""
        if not self.available:
            return None
        return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) / 1000.0

    def power_w(self) -> float | None:
        """Instantaneous board power [W], or None without NVML."""
        if not self.available:
            return None
        return float(self.nvml.nvmlDeviceGetPowerUsage(self.handle)) / 1000.0


# -- shapes ---------------------------------------------------------------------------------------------------
def _training(torch: Any, dev: Any, s: Sizes) -> tuple[Callable[[], Any], float]:
    nn = torch.nn
    f = torch.nn.functional

    class Block(nn.Module):  # type: ignore[name-defined]  # torch is imported lazily (Any)
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(s.d_model), nn.LayerNorm(s.d_model)
            self.qkv = nn.Linear(s.d_model, 3 * s.d_model, bias=False)
            self.proj = nn.Linear(s.d_model, s.d_model, bias=False)
            self.up = nn.Linear(s.d_model, 4 * s.d_model, bias=False)
            self.down = nn.Linear(4 * s.d_model, s.d_model, bias=False)

        def forward(self, x: Any) -> Any:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, s.n_heads, d // s.n_heads).unbind(2)
            att = f.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 is_causal=True)  # fmt: skip
            x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
            return x + self.down(f.gelu(self.up(self.ln2(x))))

    class Model(nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(s.vocab, s.d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(s.n_layers))
            self.ln = nn.LayerNorm(s.d_model)
            self.head = nn.Linear(s.d_model, s.vocab, bias=False)

        def forward(self, idx: Any) -> Any:
            x = self.emb(idx)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    torch.manual_seed(0)
    model = Model().to(dev)
    fused = dev.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused) if fused else torch.optim.AdamW(
        model.parameters(), lr=1e-4)  # fmt: skip
    tokens = torch.randint(0, s.vocab, (s.batch, s.seq_len + 1), device=dev)
    n_params = sum(p.numel() for p in model.parameters())
    flop_per_step = 6.0 * n_params * s.batch * s.seq_len + 6.0 * s.n_layers * s.batch * s.seq_len**2 * s.d_model

    def step() -> Any:
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = f.cross_entropy(logits.float().view(-1, s.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step, flop_per_step


def _rendering(torch: Any, dev: Any, s: Sizes) -> tuple[Callable[[], Any], float]:
    g = torch.Generator(device=dev).manual_seed(0)
    dt = torch.bfloat16
    rays = torch.randn(s.pixels, s.features, device=dev, dtype=dt, generator=g)
    mats = [torch.randn(s.features, s.features, device=dev, dtype=dt, generator=g) / math.sqrt(s.features)
            for _ in range(4)]  # fmt: skip
    frame = torch.zeros(s.pixels, s.features, device=dev, dtype=torch.float32)

    def step() -> Any:
        x = rays
        for i in range(s.passes):
            x = torch.sin(x @ mats[i % len(mats)])  # transform, then shade
        frame.add_(x)  # accumulate the tile into the frame buffer
        return frame

    return step, 2.0 * s.pixels * s.features * s.features * s.passes


def _decode(torch: Any, dev: Any, s: Sizes) -> tuple[Callable[[], Any], float]:
    g = torch.Generator(device=dev).manual_seed(0)
    dt = torch.bfloat16
    d = s.dec_d
    scale = 1.0 / math.sqrt(d)

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, device=dev, dtype=dt, generator=g) * scale

    layers = [dict(qkv=rnd(d, 3 * d), o=rnd(d, d), up=rnd(d, 4 * d), down=rnd(4 * d, d),
                   k=rnd(s.dec_ctx, d), v=rnd(s.dec_ctx, d)) for _ in range(s.dec_layers)]  # fmt: skip
    x0 = rnd(1, d)
    weight_bytes = sum(t.numel() * t.element_size() for layer in layers for t in layer.values())

    def step() -> Any:
        x = x0
        for w in layers:
            q, _k, _v = (x @ w["qkv"]).split(d, dim=-1)
            att = torch.softmax((q @ w["k"].T).float() * scale, dim=-1).to(dt) @ w["v"]
            x = x + att @ w["o"]
            x = x + torch.nn.functional.gelu(x @ w["up"]) @ w["down"]
            x = x / (x.float().norm() + 1e-6).to(dt) * math.sqrt(d)
        return x

    return step, float(weight_bytes)  # bytes read per step (the decode roofline is memory)


BUILDERS = {"training": _training, "rendering": _rendering, "decode": _decode}


# -- driver ---------------------------------------------------------------------------------------------------
def run_shape(shape: str, *, steps: int, warmup: int, min_seconds: float = 0.0, size: str | None = None,
              sync_every: int = 25) -> dict[str, Any]:  # fmt: skip
    """Build ``shape``, run ``warmup`` steps, then time at least ``steps`` steps and ``min_seconds``.

    Returns
    -------
    dict
        shape, device, steps, seconds [s], steps_per_s [1/s], setup_s [s] (process start to first timed
        step), energy_j [J], energy_per_step_j [J], avg_power_w [W] (None without NVML), and
        tflops (training, rendering) or gbs (decode) achieved.
    """
    import torch

    if shape not in BUILDERS:
        raise SystemExit(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    sizes = {"full": FULL, "tiny": TINY}[size or ("full" if cuda else "tiny")]
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    step, work_per_step = BUILDERS[shape](torch, dev, sizes)
    counter = EnergyCounter() if cuda else EnergyCounter.__new__(EnergyCounter)
    if not cuda:
        counter.handle = None

    def sync(out: Any) -> None:
        if cuda:
            torch.cuda.synchronize()
        elif out is not None:
            float(out.detach().float().sum())

    out = None
    for _ in range(warmup):
        out = step()
    sync(out)
    setup_s = time.monotonic() - _T0
    e0, t0 = counter.read_j(), time.monotonic()
    done = 0
    while done < steps or time.monotonic() - t0 < min_seconds:
        out = step()
        done += 1
        if done % sync_every == 0:
            sync(out)  # keep the host within a few steps of the device
    sync(out)
    seconds = time.monotonic() - t0
    e1 = counter.read_j()
    energy_j = (e1 - e0) if (e0 is not None and e1 is not None) else None
    result: dict[str, Any] = {
        "shape": shape,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "size": "full" if sizes is FULL else "tiny",
        "warmup": warmup,
        "steps": done,
        "seconds": seconds,
        "steps_per_s": done / seconds,
        "setup_s": setup_s,
        "energy_j": energy_j,
        "energy_per_step_j": energy_j / done if energy_j is not None else None,
        "avg_power_w": energy_j / seconds if energy_j is not None else None,
        "power_now_w": counter.power_w(),
    }
    rate_key = "gbs" if shape == "decode" else "tflops"
    result[rate_key] = work_per_step * done / seconds / (1e9 if shape == "decode" else 1e12)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("calibrate", "run"))
    parser.add_argument("--shape", required=True, choices=SHAPES)
    parser.add_argument("--steps", type=int, default=200, help="timed steps (at least)")
    parser.add_argument("--min-seconds", type=float, default=0.0, help="timed window at least this long [s]")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    parser.add_argument("--size", choices=("full", "tiny"), default=None)
    args = parser.parse_args(argv)
    if args.steps <= 0 or args.warmup < 0:
        parser.error("--steps must be positive and --warmup non-negative")
    min_seconds = args.min_seconds if args.mode == "calibrate" else 0.0  # a run does exactly --steps
    result = run_shape(args.shape, steps=args.steps, warmup=args.warmup, min_seconds=min_seconds, size=args.size)
    result["mode"] = args.mode
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)
    return 0


def parse_result(log_text: str) -> dict[str, Any] | None:
    """The last ``GRIDSHIFT_RESULT`` object in a job log, or None when the job printed none."""
    for line in reversed(log_text.splitlines()):
        if line.startswith(RESULT_PREFIX):
            with contextlib.suppress(json.JSONDecodeError):
                return json.loads(line[len(RESULT_PREFIX):])
    return None


if __name__ == "__main__":
    sys.exit(main())
