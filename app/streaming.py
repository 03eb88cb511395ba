"""Decouple a decoder stream from the UI that renders it.

`pipeline.stream` is a generator: while the app renders a round, the decoder would sit paused
and its wall clock (GenerationResult.wall_s) would include the app's rendering. `BackgroundStream`
drains the stream in a worker thread so the decoder never waits for the UI; `batches` hands
the consumer everything that arrived since its last look, so rendering never falls behind.
Pure threading + queue; knows nothing about gradio or fovea.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterator

_DONE = object()


class BackgroundStream:
    """Iterate `stream` in a daemon thread. Errors re-raise in the consumer; `close()` (also on
    garbage collection of the consuming generator) asks the worker to stop after its current item."""

    def __init__(self, stream: Iterator, name: str = "fovea-decode"):
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, args=(stream,), name=name, daemon=True)
        self._thread.start()

    def _work(self, stream: Iterator) -> None:
        try:
            for item in stream:
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

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
