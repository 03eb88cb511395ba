"""Wall-clock laps for profiling the decode loop: a `Clock` that the draft loop, the drafter head
and the round call at stage boundaries, and `NO_CLOCK`, the default, whose laps do nothing; and the
rotation that interleaved timings share (`interleaved_order`).

A lap charges the time since the previous lap to one (stage, level) key, so nested stages never
double count. On the CPU every op has finished when it returns, so perf_counter is exact; on a GPU
the profiler syncs before each lap (`sync=True`). Knows nothing about decoding.
"""
from __future__ import annotations

import time
from collections import defaultdict


class Clock:
    """Accumulates seconds per (stage, level) and how often each was charged."""

    def __init__(self, sync=None):
        self.sync = sync                                   # e.g. torch.cuda.synchronize, or None
        self.seconds: dict[tuple[str, int], float] = defaultdict(float)
        self.calls: dict[tuple[str, int], int] = defaultdict(int)
        self._last = time.perf_counter()

    def start(self) -> None:
        """Forget the time since the last lap (work that belongs to no stage)."""
        if self.sync is not None:
            self.sync()
        self._last = time.perf_counter()

    def lap(self, stage: str, level: int = 0) -> None:
        if self.sync is not None:
            self.sync()
        now = time.perf_counter()
        self.seconds[(stage, level)] += now - self._last
        self.calls[(stage, level)] += 1
        self._last = now


class _NoClock(Clock):
    def __init__(self):
        super().__init__()

    def start(self) -> None:
        pass

    def lap(self, stage: str, level: int = 0) -> None:
        pass


NO_CLOCK = _NoClock()


def interleaved_order(items: list, repeat: int) -> list:
    """`items` rotated by `repeat` places: interleaved timings start each repeat (or question) with
    another item, so drift in machine load hits all of them alike. The app, the bench, the profile's
    lever check and the locality timings share it."""
    r = repeat % len(items) if items else 0
    return items[r:] + items[:r]
