"""API tests: the app launched in-process on a free port (tiny random model), driven with
gradio_client. A full run streams rounds then reports the speedup figures; the focus, compare
and example endpoints work on the user's session; every bad input gets its sentence and the
next request on the same client still works."""
import re

import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from PIL import Image

from app.ui import build_demo, serve_in_background
from app.views import RUN_OUTPUTS

EXAMPLE = "assets/examples/scene_colour.png"
SMALL = dict(depth=2, top_k=2, total_tokens=4)          # a small tree keeps each run ~1 s on CPU
OUT = {name: i for i, name in enumerate(RUN_OUTPUTS[:-1])}             # the session (gr.State) is not sent



@pytest.fixture(scope="module")
def app_url(tiny_pipeline):
    demo = build_demo(tiny_pipeline)
    url = serve_in_background(demo)
    yield url
    demo.close()


@pytest.fixture
def client(app_url, tmp_path):
    return Client(app_url, analytics_enabled=False, verbose=False, download_files=str(tmp_path))


@pytest.fixture(scope="module")
def light_client(app_url):
    """One client for the many small requests: shares its session, downloads no output files."""
    return Client(app_url, analytics_enabled=False, verbose=False, download_files=False)


def run(client, image=EXAMPLE, question="Where is the orange triangle?", **settings):
    image = handle_file(str(image)) if image is not None else None
    job = client.submit(image, question, **{**SMALL, "max_new_tokens": 8, **settings}, api_name="/run")
    final = job.result(timeout=180)
    return job.outputs(), final


def test_full_run_streams_rounds_then_reports_speedup(client):
    outputs, final = run(client, max_new_tokens=12, repeats=2)
    live = [o[OUT["race"]] for o in outputs[:-1] if "fv-lane" in (o[OUT["race"]] or "")]
    assert live, "no streamed race update before the final one"
    assert outputs[0][OUT["summary"]] is None and "decoding" in outputs[0][OUT["metrics"]]   # the last run cleared
    summary = final[OUT["summary"]]
    timing = summary["timing"]
    assert timing["repeats"] == 2 and {"fovea", "no_correction"} <= set(timing["speedup"])
    # the same median: 3 decimals in the headline, 4 in the timing table (so no re-rounding of the 4)
    assert summary["speedup"] == pytest.approx(timing["speedup"]["fovea"]["median"], abs=5.01e-4)
    assert "median of 2 interleaved timed runs" in final[OUT["metrics"]]
    # the headline and the table give the same timed speedups, FOVEA's and its twin's
    head = dict(re.findall(r'data-method="(\w+)" data-speedup="([\d.]+)"', final[OUT["metrics"]]))
    assert head == {"fovea": f'{timing["speedup"]["fovea"]["median"]:.2f}',
                    "no_correction": f'{timing["speedup"]["no_correction"]["median"]:.2f}'}
    assert summary["twin_speedup"] == pytest.approx(timing["speedup"]["no_correction"]["median"], abs=5.01e-4)
    # the race's bars: the same timed runs' median wall times (FOVEA, twin, target alone)
    lane_ms = [int(ms) for ms in re.findall(r'fv-lane-time">(\d+) ms', final[OUT["race"]])]
    table_ms = [summary[m]["wall_s"] * 1e3 for m in ("fovea", "no_correction", "autoregressive")]
    assert lane_ms == pytest.approx(table_ms, abs=1)
    # while the repeats are timed, the progress says which, and both answers are whole
    timed = [i for i, o in enumerate(outputs) if "timing run" in str(o[OUT["metrics"]])]
    assert [re.search(r"timing run (\d) of up to 2", outputs[i][OUT["metrics"]]).group(1) for i in timed] == ["1", "2"]
    shown = {name: [o[OUT[name]] for o in outputs[:timed[0]] if isinstance(o[OUT[name]], str)][-1]
             for name in ("answer", "baseline")}                        # what stays on screen while timing
    assert shown["answer"].count('class="fv-tok') == 12 and shown["baseline"] == final[OUT["baseline"]]
    assert final[OUT["race"]].count('class="fv-lane"') == 3 and "corrected draft states" in final[OUT["vision"]]
    assert summary["fovea"]["done"] and summary["autoregressive"]["done"]
    assert summary["speedup"] > 0 and summary["fovea"]["tokens_per_s"] > 0
    assert summary["fovea"]["tokens"] == summary["autoregressive"]["tokens"] == 12
    assert summary["answer"] == summary["baseline_answer"]           # greedy FOVEA is lossless
    assert summary["question"] == "Where is the orange triangle?"
    assert final[OUT["answer"]].count('class="fv-tok') == 12
    assert "over autoregressive decoding" in final[OUT["metrics"]] and "</s>" not in final[OUT["answer"]]
    assert Image.open(final[OUT["heatmap"]]).size == (384, 384)
    assert "K = " in final[OUT["caption"]] and "gate g" in final[OUT["caption"]]
    assert "fv-tree" in final[OUT["tree"]] and "Out of distribution" not in final[OUT["ood"]]   # a generated scene
    assert final[OUT["scrubber"]]["maximum"] == summary["focus_steps"] - 1
    assert final[OUT["focus_plot"]]["type"] == "plotly" and final[OUT["filmstrip"]]


def test_scrub_and_compare_use_this_users_last_run(client):
    run(client)
    heatmap, caption, tree = client.predict(2, api_name="/scrub")
    assert re.search(r"Step 3 / \d+", caption) and Image.open(heatmap).size == (384, 384) and "fv-tnode" in tree
    with pytest.raises(AppError, match="scrubber takes a whole number from 0 to") as err:
        client.predict(999, api_name="/scrub")                            # the app's words, not gradio's
    assert "maximum value" not in str(err.value)
    table, figure = client.predict("dense", api_name="/compare")
    assert "dense" in table and "(your run)" in table and figure["type"] == "plotly"
    table, _ = client.predict("no correction", api_name="/compare")
    assert table.count("<tr>") == 4                                   # header + your run + 2 variants


def test_compare_before_any_run_says_what_to_do(client):
    with pytest.raises(AppError, match="Run a request first"):
        client.predict("dense", api_name="/compare")


@pytest.mark.parametrize("family", ["scene", "ocr", "chart"])
def test_random_example_buttons_draw_an_image_and_question(client, family):
    image, question = client.predict(api_name=f"/random_{family}")
    w, h = Image.open(image).size
    assert min(w, h) >= 64 and question.strip()                   # world v2: non-square images too


def _bad_files(folder):
    big = folder / "big.png"
    Image.new("1", (10_000, 10_000)).save(big)
    tiny = folder / "tiny.png"
    Image.new("RGB", (1, 1)).save(tiny)
    whole = open(EXAMPLE, "rb").read()
    truncated = folder / "truncated.png"
    truncated.write_bytes(whole[: len(whole) // 2])
    fake = folder / "notes.png"
    fake.write_text("this is a text file renamed to .png\n")
    return {"huge": big, "one_pixel": tiny, "truncated": truncated, "not_an_image": fake}


BAD_INPUTS = {
    "no_image": (dict(image=None), "Please upload an image"),
    "no_question": (dict(question="   "), "Please type a question"),
    "huge": ({}, "too large to process"),
    "one_pixel": ({}, "at least 8 x 8 pixels"),
    "truncated": ({}, "could not be read as an image"),
    "not_an_image": ({}, "could not be read as an image"),
    "long_question": (dict(question="why " * 1250), "please keep it under 500 characters"),
    "zero_tokens": (dict(max_new_tokens=0), "Max new tokens must be a whole number between 1 and 256"),
    "too_many_tokens": (dict(max_new_tokens=10_000), "Max new tokens must be a whole number between 1 and 256"),
    "k_min_above_k_max": (dict(k_min=40, k_max=8), "lower K_min or raise K_max"),
    "zero_repeats": (dict(repeats=0), "Timing repeats must be a whole number between 1 and 15"),
    "unknown_drafter": (dict(drafter="pixels"), "Drafter cache must be one of: full, text"),
    "trigger_above_one": (dict(trigger=1.5), "Correct only where unsure must be a number between 0 and 1"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gets_its_message_and_the_next_request_works(light_client, tmp_path, case):
    change, message = BAD_INPUTS[case]
    files = _bad_files(tmp_path) if case in ("huge", "one_pixel", "truncated", "not_an_image") else {}
    change = {"image": files[case], **change} if case in files else change
    with pytest.raises(AppError) as err:
        run(light_client, **change)
    assert message in str(err.value)
    assert "Traceback" not in str(err.value)
    _, final = run(light_client, max_new_tokens=2)
    assert final[OUT["summary"]]["speedup"] is not None


def _odd_images(folder):
    src = Image.open(EXAMPLE).convert("RGB")
    paths = {}
    for name, img, ext in [("rgba", src.convert("RGBA"), "png"), ("palette", src.convert("P"), "png"),
                           ("gray", src.convert("L"), "png"), ("gray16", src.convert("I;16"), "png"),
                           ("cmyk", src.convert("CMYK"), "jpg")]:
        paths[name] = folder / f"{name}.{ext}"
        img.save(paths[name])
    paths["animated"] = folder / "animated.gif"
    src.save(paths["animated"], save_all=True, append_images=[src.rotate(90), src.rotate(180)], duration=100)
    return paths


def test_odd_image_modes_and_unusual_characters_are_accepted(light_client, tmp_path):
    """RGBA, palette, grayscale, 16-bit, CMYK and animated images are converted, not refused;
    characters the tokenizer never saw still decode (byte-level BPE)."""
    for name, path in _odd_images(tmp_path).items():
        _, final = run(light_client, image=path, max_new_tokens=2)
        assert final[OUT["summary"]]["image_sha"], name
    _, final = run(light_client, question="Was ist das ☃ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u200b 日本語 🙂?", max_new_tokens=2)
    assert final[OUT["summary"]]["fovea"]["tokens"] == 2


def test_a_photo_like_upload_gets_the_out_of_distribution_warning(light_client, tmp_path):
    from fovea.analysis.ood import photo_like
    path = tmp_path / "photo.png"
    photo_like(3).save(path)                                        # a value-noise texture, non-square
    _, final = run(light_client, image=path, max_new_tokens=2, repeats=1)
    assert "Out of distribution" in final[OUT["ood"]] and "--target" in final[OUT["ood"]]
    assert final[OUT["summary"]]["ood"]["in_world"] is False
    assert "one timed run" in final[OUT["metrics"]]


def test_without_a_diffusion_model_the_diffusion_run_says_what_is_missing(light_client):
    """This module's app has no diffusion model: /run_diffusion answers with what is missing and the
    command that trains one, and the next FOVEA request still works."""
    with pytest.raises(AppError, match="No diffusion model is loaded") as err:
        light_client.predict(handle_file(EXAMPLE), "Where is the orange triangle?", "latch", 1,
                             api_name="/run_diffusion")
    assert "python -m fovea.train diffusion" in str(err.value) and "docs/latch.md" in str(err.value)
    assert "Traceback" not in str(err.value)
    _, final = run(light_client, max_new_tokens=2)
    assert final[OUT["summary"]]["speedup"] is not None


def test_every_api_output_is_named(app_url):
    info = Client(app_url, analytics_enabled=False, verbose=False, download_files=False).view_api(
        print_info=False, return_format="dict")
    labels = [r["label"] for endpoint in info["named_endpoints"].values() for r in endpoint["returns"]]
    assert labels and not [label for label in labels if re.fullmatch(r"value_\d+", label or "")]


def test_export_then_import_reproduces_the_same_views(client):
    _, final = run(client, max_new_tokens=8, repeats=1)
    trace, gif = client.predict(api_name="/export_trace")
    assert trace.endswith(".json") and Image.open(gif).format == "GIF"
    back = client.predict(handle_file(trace), api_name="/import_trace")
    for name in ("answer", "baseline", "caption", "tree", "race", "vision", "compare_html"):
        assert back[OUT[name]] == final[OUT[name]], name
    assert back[OUT["summary"]]["imported"] and back[OUT["summary"]]["answer"] == final[OUT["summary"]]["answer"]
    heatmap, caption, tree = client.predict(1, api_name="/scrub")       # the imported run is the session now
    assert "Step 2 /" in caption
    with pytest.raises(AppError, match="imported trace"):
        client.predict("dense", api_name="/compare")


BAD_TRACES = {
    "not_json": ("{oops", "not valid JSON"),
    "other_json": ('{"a": 1}', "not a FOVEA trace"),
    "future_version": ('{"schema": "fovea-trace", "version": 7}', "this app reads version 1"),
    "damaged": ('{"schema": "fovea-trace", "version": 1, "memory_grid": [8, 8]}', "damaged"),
}


@pytest.mark.parametrize("case", list(BAD_TRACES))
def test_a_bad_trace_file_gets_a_clear_message(light_client, tmp_path, case):
    text, phrase = BAD_TRACES[case]
    path = tmp_path / "trace.json"
    path.write_text(text)
    with pytest.raises(AppError, match=phrase) as err:
        light_client.predict(handle_file(str(path)), api_name="/import_trace")
    assert "Traceback" not in str(err.value)


def test_export_before_any_run_says_what_to_do(app_url):
    fresh = Client(app_url, analytics_enabled=False, verbose=False, download_files=False)
    with pytest.raises(AppError, match="Run a request"):
        fresh.predict(api_name="/export_trace")


def test_both_drafter_contexts_race_losslessly_and_the_trace_keeps_which_one(client):
    """The Drafter cache control picks the FOVEA drafter and its twin of that context (the app's
    default: settings.DEFAULT_CONTEXT); each is lossless, and the
    exported trace and its import say which context ran."""
    import json

    for context in ("full", "text"):
        _, final = run(client, drafter=context, max_new_tokens=8, repeats=1)
        summary = final[OUT["summary"]]
        assert summary["drafter_context"] == context and summary["answer"] == summary["baseline_answer"]
        assert final[OUT["race"]].count('class="fv-lane"') == 3
        trace, _ = client.predict(api_name="/export_trace")
        assert json.loads(open(trace).read())["config"]["drafter_context"] == context
        back = client.predict(handle_file(trace), api_name="/import_trace")
        assert back[OUT["summary"]]["drafter_context"] == context
    _, final = run(client, max_new_tokens=4, repeats=1)                 # not given: the app's default
    from app.settings import DEFAULT_CONTEXT

    assert final[OUT["summary"]]["drafter_context"] == DEFAULT_CONTEXT
