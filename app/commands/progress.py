"""Progress bars of long CLI operations (tqdm on stderr, so stdout keeps only the result)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tqdm import tqdm

#: Where each phase of a plan starts [% of the bar]; the solve advances with its time limit.
PLAN_PHASES = {"problem": 5, "solve": 20, "store": 90}


@contextmanager
def plan_bar(time_limit_s: float, *, disable: bool = False) -> Iterator[Callable[[str], None]]:
    """A bar over a plan's phases; yields the ``on_phase`` callback. During the solve a ticker moves it with the
    solver's time limit (the solve stops at its limit, so the bar never waits at 89 % for long)."""
    bar = tqdm(total=100, desc="plan", unit="%", leave=True, disable=disable, bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} {postfix}")
    state: dict[str, Any] = {"phase": "", "t0": time.monotonic()}
    stop = threading.Event()

    def move_to(pct: float) -> None:
        pct = min(100.0, pct)
        if pct > bar.n:
            bar.update(pct - bar.n)

    def on_phase(name: str) -> None:
        state["phase"], state["t0"] = name, time.monotonic()
        bar.set_postfix_str(name)
        move_to(PLAN_PHASES.get(name, bar.n))

    def tick() -> None:
        while not stop.wait(0.5):
            if state["phase"] == "solve":
                share = min(1.0, (time.monotonic() - float(state["t0"])) / max(time_limit_s, 0.1))
                move_to(PLAN_PHASES["solve"] + share * (PLAN_PHASES["store"] - PLAN_PHASES["solve"] - 1))

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield on_phase
        move_to(100)
    finally:
        stop.set()
        ticker.join(timeout=2)
        bar.close()
