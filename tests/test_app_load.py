"""Load test: 8 gradio_client users x 3 requests each, at once, against the app launched with a
queue concurrency limit of 2. Every request completes without error, and each user only ever
gets figures of their own input (question, image hash, answer equal to a single-threaded
reference, focus view of their own run). Two requests are served at once, but their decodes take
turns on the app's one decode thread (app.streaming), so no decode ever runs beside another and
every timing is taken alone."""
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from gradio_client import Client, handle_file

from app.callbacks import image_sha
from app.ui import build_demo, serve_in_background
from fovea.config import FoveaConfig

USERS, REQUESTS, LIMIT = 8, 3, 2
SETTINGS = dict(depth=2, top_k=2, total_tokens=4, max_new_tokens=4)
FAMILIES = ("scene", "ocr", "chart")


class CountingPipeline:
    """Delegates to the real pipeline and records how many decode streams run at once."""

    def __init__(self, pipeline):
        self._pipeline, self._lock, self.active, self.peak = pipeline, threading.Lock(), 0, 0

    def __getattr__(self, name):
        return getattr(self._pipeline, name)

    def stream(self, *args, **kwargs):
        with self._lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            yield from self._pipeline.stream(*args, **kwargs)
        finally:
            with self._lock:
                self.active -= 1



@pytest.fixture(scope="module")
def inputs(tiny_pipeline, tmp_path_factory):
    """One distinct (image file, question, image hash, reference answer) per user and request."""
    folder = tmp_path_factory.mktemp("load")
    cfg = FoveaConfig().replace(tree=dict(depth=2, top_k=2, total_tokens=4), decoding=dict(max_new_tokens=4))
    table = {}
    for user in range(USERS):
        for req in range(REQUESTS):
            image, question = tiny_pipeline.random_example(FAMILIES[(user + req) % 3], seed=1000 * user + req)
            question = f"[user {user} request {req}] {question}"
            path = folder / f"u{user}_r{req}.png"
            image.save(path)
            ref = tiny_pipeline.generate(image, question, cfg)
            table[user, req] = (path, question, image_sha(tiny_pipeline.validate_image(path)), ref.text)
    return table


def test_concurrent_users_all_complete_with_only_their_own_data(tiny_pipeline, inputs):
    counting = CountingPipeline(tiny_pipeline)
    demo = build_demo(counting, concurrency_limit=LIMIT)
    url = serve_in_background(demo)

    def user(u: int) -> list[str]:
        client = Client(url, analytics_enabled=False, verbose=False, download_files=False)
        problems = []
        for r in range(REQUESTS):
            path, question, sha, reference = inputs[u, r]
            final = client.submit(handle_file(str(path)), question, **SETTINGS, api_name="/run").result(timeout=240)
            s = final[12]
            if (s["question"], s["image_sha"]) != (question, sha):
                problems.append(f"user {u} request {r} got someone else's request: {s['question']!r}")
            if s["answer"] != reference or s["baseline_answer"] != reference:
                problems.append(f"user {u} request {r}: answer {s['answer']!r} != reference {reference!r}")
            if s["speedup"] is None or s["fovea"]["tokens"] != SETTINGS["max_new_tokens"]:
                problems.append(f"user {u} request {r}: incomplete figures {s}")
            _, caption, _ = client.predict(s["focus_steps"] - 1, api_name="/scrub")
            if f"/ {s['focus_steps']}**" not in caption:
                problems.append(f"user {u} request {r}: focus view of another run: {caption[:60]!r}")
        return problems

    try:
        with ThreadPoolExecutor(USERS) as pool:
            problems = [p for result in pool.map(user, range(USERS)) for p in result]
    finally:
        demo.close()
    assert problems == []
    assert counting.peak == 1, f"{counting.peak} decodes ran at once; they must take turns on the decode thread"
