"""Decouple a decoder stream from the UI that renders it, on one long-lived decode thread.

`pipeline.stream` is a generator: while the app renders a round, the decoder would sit paused
and its wall clock (GenerationResult.wall_s) would include the app's rendering. `BackgroundStream`
drains the stream on the decode thread so the decoder never waits for the UI; `batches` hands
the consumer everything that arrived since its last look, so rendering never falls behind.

Every stream of the process runs on the *same* thread, one after another, and so does every other
torch call the app makes. Measured on 2 cores with the bundled model (20 interleaved pairs): a model
loaded on the main thread and decoded on another ran FOVEA ~2x slower (speedup 1.41x -> 1.00x); a
consumer thread folding records while the decoder ran, and lazy trace conversions (an LM-head
matmul) on gradio's worker threads, slowed it the same way. (torch's OpenMP worker pools per calling
thread are the likely cause; only the slowdown was measured.) So the app loads its model here and
`prepare` converts each streamed record here, before the UI reads it. One thread also means every
method is timed the same way, and two users' decodes never run at once.
Pure threading + queue; knows nothing about gradio or fovea.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterator

_DONE = object()


class _DecodeThread:
    """One daemon thread that runs submitted jobs (callables) in order, started on first use."""

    def __init__(self, name: str = "fovea-decode"):
        self._jobs: queue.Queue = queue.Queue()
        self._name = name
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
        self._jobs.put(job)

    def _loop(self) -> None:
        while True:
            self._jobs.get()()


DECODE_THREAD = _DecodeThread()


def run_on_decode_thread(fn, thread: _DecodeThread = DECODE_THREAD):
    """fn() on the decode thread, this thread blocked until it returns; its value or its error."""
    box: dict = {}
    done = threading.Event()

    def job():
        try:
            box["value"] = fn()
        except BaseException as err:       # re-raised in the caller
            box["error"] = err
        finally:
            done.set()
    thread.submit(job)
    done.wait()
    if "error" in box:
        raise box["error"]
    return box["value"]


class BackgroundStream:
    """Iterate `stream` on the shared decode thread. Errors re-raise in the consumer; `close()` (also
    on garbage collection of the consuming generator) asks the decoder to stop after its current
    item."""

    def __init__(self, stream: Iterator, prepare=None, thread: _DecodeThread = DECODE_THREAD):
        """prepare(item), when given, runs on the decode thread before the item is handed over."""
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._finished = threading.Event()
        thread.submit(lambda: self._work(stream, prepare))

    def _work(self, stream: Iterator, prepare) -> None:
        try:
            if self._stop.is_set():        # closed while it waited for its turn
                return
            for item in stream:
                if prepare is not None:
                    prepare(item)
                self._queue.put((item, None))
                if self._stop.is_set():
                    break
        except BaseException as err:          # handed to the consumer, which re-raises it
            self._queue.put((_DONE, err))
            return
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
            self._finished.set()
        self._queue.put((_DONE, None))

    def batches(self) -> Iterator[list]:
        """Lists of items in arrival order: block for one, then take all already waiting."""
        try:
            while True:
                item, err = self._queue.get()
                batch = []
                while True:
                    if err is not None:
                        raise err
                    if item is _DONE:
                        if batch:
                            yield batch
                        return
                    batch.append(item)
                    try:
                        item, err = self._queue.get_nowait()
                    except queue.Empty:
                        break
                yield batch
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until this stream's decoding has ended; True when it has."""
        return self._finished.wait(timeout)
