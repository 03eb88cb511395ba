"""Browser test in headless Chromium (Debian `chromium` + Playwright) against the app launched
in-process on a tiny random model whose visual correction is steered (see `steered_pipeline`), so
that it changes draft top tokens and the target accepts some of those flips.

What a user sees, checked on the page:
  - a run: streamed answer, heatmap, draft tree, focus plot; scrubber, player and token click move
    the focus view; a bad input shows its message and clears the previous results;
  - the headline's timed speedups (FOVEA and its twin) equal the table's; the tree's root label is
    visible, every node label and answer token reads at WCAG AA contrast (4.5:1), and the accepted
    path fills the tree's first rows;
  - the flipped-token marks in the answer (accepted ⚑ and struck-through rejected ⚑), one per flip
    that the exported trace holds on the committed path;
  - a depth-16 tree with fixed-size labels of at least 11 px that scrolls sideways;
  - a wide upload letterboxed in the heatmap: PAD_RGB bars above and below, the picture at its
    own aspect, never stretched;
  - the out-of-distribution warning for a photo-like image, none for a generated scene;
  - a trace exported and imported again in a fresh page gives the same answer, tree, caption and
    heatmap;
  - the diffusion view (a second app, with a tiny random diffusion model steered toward one chart
    question's gold answer): the decoding-family choice, submitting the question box, the step x
    position grid (a row per step, a cell per position, legible shades), BWEC's block commit and the
    CVC step labelled and explained, the timed headline equal to the table; and, on the first app,
    which has no diffusion model, the notice saying what is missing and the command that trains it,
    a refused Run that crashes nothing and clears the earlier results.
Screenshots go to pytest's tmp dir, or FOVEA_SCREENSHOT_DIR when set (the committed
assets/screenshots/tree_depth16.png comes from this test, diffusion_tiny.png is the diffusion view on
the steered tiny model; main.png and focus_shifts.png from
`python -m app.screenshots` on the bundled model)."""
import base64
import collections
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.screenshots import (VIEWPORT, ask, capture, chromium_path, click_token, launch_browser, open_app,
                             pick_family, play, run_request, scrub_by)
from app.ui import build_demo, serve_in_background
from fovea.methods import METHODS
from fovea.config import FoveaConfig
from fovea.data import make_sample
from fovea.diffusion.config import FROZEN_BLOCK_LENGTH, FROZEN_LATCH
from fovea.data.sample import PAD_RGB

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_path() is None, reason="Debian chromium is not installed (apt-get install chromium)"),
]
TOKENS = 12
MIN_LABEL_PX = 11
# An untrained drafter spreads its probability thinly, so the tree grows wide before it grows deep:
# depth 16 is reached only when the budget holds every drafted node (top-k 2: 2 + 4 x 15 = 62).
DEEP_TREE = {"Tree depth": 16, "Tree top-k": 2, "Tree budget (nodes)": 64, "Stop below (dynamic depth)": 0}
SCENE = make_sample(1, family="scene", split="shifted")        # 192 x 128: a wide generated scene


def steer_correction(drafter, token: int, strength: float = 50.0) -> None:
    """Make the gated correction a constant push along the LM-head row of `token`, with the gate
    open: every corrected draft state then proposes `token` (an untrained corrector is the identity
    and never flips anything)."""
    with torch.no_grad():
        row = drafter.lm_head_weight[token].float()
        drafter.corrector.f[2].weight.zero_()
        drafter.corrector.f[2].bias.copy_(strength * row / row.norm())
        drafter.corrector.g[2].bias.fill_(8.0)                    # sigmoid(8) ~ 1


@pytest.fixture(scope="module")
def steered_pipeline():
    """A tiny random pipeline of its own (the session's is shared, and this one is modified) whose
    FOVEA drafter is steered toward the most frequent token of the target's answer on SCENE: the
    correction then flips draft tokens, and where the target says that token next it accepts the flip."""
    from fovea.pipeline import FoveaPipeline

    pipe = FoveaPipeline.tiny_random(seed=0)
    cfg = FoveaConfig().replace(decoding=dict(max_new_tokens=TOKENS))
    answer = pipe.generate(SCENE.image, SCENE.question, cfg, METHODS["autoregressive"]).tokens
    steer_correction(pipe.drafters["fovea"], collections.Counter(answer).most_common(1)[0][0])
    return pipe


@pytest.fixture(scope="module")
def app_url(steered_pipeline):
    initial = FoveaConfig().replace(tree=dict(depth=2, top_k=2, total_tokens=4), decoding=dict(max_new_tokens=TOKENS))
    demo = build_demo(steered_pipeline, initial=initial, context="full")   # the steered drafter's context
    url = serve_in_background(demo)
    yield url
    demo.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    chromium = launch_browser(pw)
    yield chromium
    chromium.close()
    pw.stop()


def _new_page(browser):
    page = browser.new_page(viewport=VIEWPORT)
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    return page


@pytest.fixture
def page(browser):
    page = _new_page(browser)
    yield page
    errors = page.errors
    page.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> Path:
    return Path(os.environ.get("FOVEA_SCREENSHOT_DIR") or tmp_path_factory.mktemp("screenshots"))


def image_pixels(page, selector: str) -> np.ndarray:
    """uint8 [H, W, 3] of the image an <img> on the page shows (a served file or a data URL)."""
    src = page.locator(selector).evaluate("img => img.src")
    data = base64.b64decode(src.split(",", 1)[1]) if src.startswith("data:") else page.request.get(src).body()
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@dataclass
class SceneRun:
    """The wide generated scene, run in one page and exported from it."""
    page: object
    trace: dict               # the exported trace file (schema fovea-trace)
    trace_path: Path
    exported: list[str]       # names of the exported files


@pytest.fixture(scope="module")
def scene_png(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("scene") / "scene.png"
    SCENE.image.save(path)
    return path


@pytest.fixture(scope="module")
def scene_run(browser, app_url, scene_png):
    folder = scene_png.parent
    page = _new_page(browser)
    run_request(page, app_url, scene_png, SCENE.question)
    # export through the Trace file tab, as a user would, and download the JSON it links to
    page.get_by_role("tab", name="Trace file").click()
    page.click("#fv-export")
    page.locator("#fv-exported a[href*='fovea_trace']").first.wait_for(timeout=60_000)
    hrefs = [a.evaluate("a => a.href") for a in page.locator("#fv-exported a[href]").all()]
    trace_url = next(h for h in hrefs if h.endswith(".json"))
    trace_path = folder / "fovea_trace.json"
    trace_path.write_bytes(page.request.get(trace_url).body())
    page.get_by_role("tab", name="Input").click()
    yield SceneRun(page, json.loads(trace_path.read_text()), trace_path, [h.rsplit("/", 1)[-1] for h in hrefs])
    errors = page.errors
    page.close()
    assert not errors, errors


def test_run_scrub_click_and_screenshot(page, app_url, out_dir):
    run_request(page, app_url, "assets/examples/scene_colour.png", "Where is the orange triangle?")

    # the highlighted answer: one coloured span per token
    tokens = page.locator("#fv-answer .fv-tok")
    assert tokens.count() == TOKENS
    assert "background" in (tokens.first.get_attribute("style") or "")
    # the heatmap overlay and the draft tree of the first focus step
    heatmap = page.locator("#fv-heatmap img")
    assert heatmap.count() == 1 and heatmap.evaluate("img => img.naturalWidth") == 384
    assert "Step 1 /" in page.inner_text("#fv-caption")
    assert page.locator("#fv-tree .fv-tnode").count() > 1

    assert "Step 4 /" in scrub_by(page, 3)
    assert "Step 4 /" not in play(page)                          # the player advanced the focus view
    # the last token is a bonus token: its focus view is the last draft state of the run
    total = int(re.search(r"Step \d+ / (\d+)", page.inner_text("#fv-caption")).group(1))
    assert f"Step {total} / {total}" in click_token(page, expect_step=total)
    assert page.locator("#fv-answer .fv-selected").count() == 1

    shots = capture(page, out_dir)
    assert page.locator("#fv-focus-plot .js-plotly-plot").count() == 1
    assert all(p.stat().st_size > 20_000 for p in shots.values())

    # a bad input raises a toast and clears the last results: they belong to another input
    page.fill("#fv-question textarea", "")
    page.click("#fv-run")
    page.get_by_text("Please type a question about the image.").wait_for(timeout=30_000)
    page.wait_for_function("document.querySelectorAll('#fv-answer .fv-tok').length === 0", timeout=30_000)
    assert page.locator("#fv-metrics .fv-head-item").count() == 0 and page.locator("#fv-tree .fv-tnode").count() == 0


# WCAG relative luminance and contrast ratio, and the nearest opaque background behind an element
_CONTRAST = """els => els.map(e => {
  const rgb = s => s.match(/[\\d.]+/g).map(Number);
  const lum = c => { const [r, g, b] = c.slice(0, 3).map(v => { v /= 255;
    return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  let n = e, bg = null;
  while (n && !bg) { const c = rgb(getComputedStyle(n).backgroundColor); if (c.length < 4 || c[3] > 0) bg = c; n = n.parentElement; }
  bg = bg || [255, 255, 255];
  const [a, b] = [lum(rgb(getComputedStyle(e).color)), lum(bg)].sort((x, y) => y - x);
  return {text: e.innerText, ratio: (a + 0.05) / (b + 0.05)};
})"""


def test_the_headline_and_the_table_agree_and_the_tree_is_legible(scene_run):
    page = scene_run.page
    # the headline: FOVEA's and its twin's timed speedups; the table repeats the same medians, timed
    head = {e["method"]: e["speedup"] for e in page.locator("#fv-metrics .fv-head-item").evaluate_all(
        "els => els.map(e => ({method: e.dataset.method, speedup: e.dataset.speedup}))")}
    assert set(head) == {"fovea", "no_correction"}
    cells = page.locator("#fv-metrics tr.fv-timed-speedup td").all_inner_texts()
    assert [c.split("×")[0] for c in cells] == [head["fovea"], head["no_correction"], "1.00"]
    table = page.inner_text("#fv-metrics table")
    assert "timed: median of" in table and "live pass" in table
    # the draft tree: the root's label is visible, every label reads at >= 4.5:1, and the accepted
    # path is spelled out above the grid and fills its first rows
    root = page.locator("#fv-tree .fv-root b")
    assert root.is_visible() and root.inner_text().strip()
    ratios = page.locator("#fv-tree .fv-tnode b, #fv-tree .fv-tnode i, #fv-answer .fv-tok").evaluate_all(_CONTRAST)
    assert ratios and min(r["ratio"] for r in ratios) >= 4.5, min(ratios, key=lambda r: r["ratio"])
    assert "Accepted path:" in page.inner_text("#fv-tree .fv-tree-path")
    rows = page.locator("#fv-tree .fv-tnode").evaluate_all("els => els.map(e => [e.className, e.style.gridRow])")
    accepted_rows = sorted(int(r) for c, r in rows if "fv-accepted" in c)
    assert accepted_rows == list(range(3, 3 + len(accepted_rows)))          # right under the root (row 2)


def committed_flips(trace: dict) -> tuple[list, list]:
    """From a trace file's FOVEA rounds: (accepted, turned_down) flips of draft states on the
    committed path (the root or an accepted node: only their children can reach the answer).
    accepted: (round, k) of the emitted token the flip became; turned_down: (round, state node)."""
    accepted, turned_down = [], []
    for i, rnd in enumerate(trace["runs"]["fovea"]["rounds"]):
        path = {0, *rnd["accepted"]}
        for r in rnd["retrieval"]:
            if r["node"] not in path or not r["top_before"] or r["top_before"][0][0] == r["top_after"][0][0]:
                continue
            flipped_to = r["top_after"][0][0]
            child = next((c for c, p in enumerate(rnd["parents"]) if p == r["node"] and rnd["tokens"][c] == flipped_to),
                         None)
            if child in rnd["accepted"]:
                accepted.append((i, rnd["accepted"].index(child)))
            else:
                turned_down.append((i, r["node"]))
    return accepted, turned_down


def test_flipped_draft_tokens_are_marked_in_the_answer(scene_run):
    accepted, turned_down = committed_flips(scene_run.trace)
    assert accepted and turned_down, "the steered correction should flip tokens the target accepts and rejects"
    page = scene_run.page
    # an accepted flip: a ⚑ on the very token it became
    marks = page.locator("#fv-answer .fv-flip-accepted")
    assert marks.count() == len(accepted)
    for i, k in accepted:
        mark = page.locator(f'#fv-answer .fv-tok[data-iter="{i}"][data-k="{k}"] .fv-flip-accepted')
        assert mark.is_visible() and mark.inner_text() == "⚑"
    # a flip the target turned down: a struck-through ⚑ token where the target said otherwise
    rejected = page.locator("#fv-answer .fv-flip-rejected")
    assert rejected.count() == len(turned_down)
    for j in range(rejected.count()):
        mark = rejected.nth(j)
        assert mark.is_visible() and "⚑" in mark.inner_text() and mark.locator("s").count() == 1
    sizes = page.locator("#fv-answer .fv-flip").evaluate_all(
        "els => els.map(e => parseFloat(getComputedStyle(e).fontSize))")
    assert min(sizes) >= MIN_LABEL_PX
    # the same flips in the "Where vision mattered" table
    page.get_by_role("tab", name="Where vision mattered").click()
    head = page.locator("#fv-vision .fv-vision-head").inner_text()
    assert f"the target accepted {len(accepted)} of those flips" in head
    page.get_by_role("tab", name="Focus").first.click()


def test_a_wide_upload_is_letterboxed_in_the_heatmap_never_stretched(scene_run):
    px = image_pixels(scene_run.page, "#fv-heatmap img").astype(float)          # [side, side, 3]
    side = px.shape[0]
    assert px.shape[:2] == (side, side)
    # the upload is w x h (3:2); letterboxed its long side fills the canvas and the rest is bars
    w, h = SCENE.image.size
    content_h = round(side * h / w)
    y0, y1 = (side - content_h) // 2, (side - content_h) // 2 + content_h
    assert w > h and 0 < y0
    # the overlay tints the patches the first focus step read and dims the rest by one factor; the
    # patch grid lines are lightened: compare only unread patches, off the grid lines
    rows, cols = scene_run.trace["memory_grid"]
    first = scene_run.trace["runs"]["fovea"]["rounds"][0]
    read = {i for r in first["retrieval"] if r["node"] == 0 for i in r["indices"]}
    ys, xs = np.arange(side) * rows // side, np.arange(side) * cols // side
    unread = ~np.isin(ys[:, None] * cols + xs[None, :], list(read))
    unread[[r * side // rows for r in range(1, rows)], :] = False
    unread[:, [c * side // cols for c in range(1, cols)]] = False
    bars = np.zeros((side, side), bool)
    bars[:y0], bars[y1:] = True, True
    # the bars: PAD_RGB grey, dimmed like the rest of the unread patches
    bar_px = px[bars & unread]
    assert len(bar_px) > 1000
    dim = bar_px.mean() / PAD_RGB[0]
    assert 0.1 < dim <= 1
    assert np.abs(bar_px - np.array(PAD_RGB) * dim).max() <= 1
    # the picture: the upload scaled to side x content_h (aspect kept), under the same dimming
    scaled = np.asarray(SCENE.image.convert("RGB").resize((side, content_h), Image.BICUBIC), float)
    band = unread[y0:y1]
    diff = np.abs(px[y0:y1][band] - scaled[band] * dim)
    assert np.median(diff) <= 1 and np.mean(diff <= 3) > 0.99
    # which means something only because the scene looks nothing like a bar: a picture shrunk into a
    # narrower band (grey where the scene should be) could not pass
    assert np.mean(np.abs(scaled[band] - np.array(PAD_RGB)).max(axis=-1) > 40) > 0.9


def test_the_ood_warning_shows_for_a_photo_and_not_for_a_generated_scene(scene_run, page, app_url, tmp_path):
    from fovea.analysis.ood import photo_like

    assert "Out of distribution" not in scene_run.page.inner_text("#fv-ood")
    photo = tmp_path / "photo.png"
    photo_like(3).save(photo)                                       # value noise, non-square
    run_request(page, app_url, photo, "What is in the picture?")
    warning = page.locator("#fv-ood .fv-ood[role=alert]").first
    assert warning.is_visible()
    text = warning.inner_text()
    assert "Out of distribution" in text and "synthetic world" in text and "--target" in text
    assert "--target <LLaVA-NeXT or Qwen2.5-VL folder>" in text                 # its placeholders shown


# A DOM serialisation with each element's attributes sorted: the browser keeps attributes in the order
# they were set, which may differ between a streamed render and an imported one for the same view.
_CANONICAL = """e => { const walk = n => n.nodeType === 3 ? n.textContent : n.nodeType !== 1 ? '' :
  '<' + n.tagName + [...n.attributes].map(a => ' ' + a.name + '=' + JSON.stringify(a.value)).sort().join('') + '>'
  + [...n.childNodes].map(walk).join('') + '</' + n.tagName + '>'; return walk(e); }"""


def _views(page) -> dict:
    return {"answer": page.locator("#fv-answer .fv-answer").evaluate(_CANONICAL),
            "tree": page.locator("#fv-tree .fv-tree").evaluate(_CANONICAL),
            "caption": page.inner_text("#fv-caption"),
            "heatmap": image_pixels(page, "#fv-heatmap img")}


def test_exporting_then_importing_a_trace_reproduces_the_views(scene_run, page, app_url):
    assert any(name.endswith(".gif") for name in scene_run.exported)       # the focus trajectory too
    before = _views(scene_run.page)
    open_app(page, app_url)                                                 # a fresh session: nothing run
    page.get_by_role("tab", name="Trace file").click()
    page.set_input_files("#fv-import-file input[type=file]", str(scene_run.trace_path))
    page.locator("#fv-import-file").get_by_text("fovea_trace.json").wait_for(timeout=30_000)
    page.click("#fv-import")
    page.wait_for_selector("#fv-answer .fv-tok", timeout=60_000)
    page.wait_for_function("document.querySelector('#fv-caption').innerText.includes('Step 1 /')", timeout=60_000)
    after = _views(page)
    for name in ("answer", "tree", "caption"):
        assert after[name] == before[name], name
    assert after["heatmap"].shape == before["heatmap"].shape and np.array_equal(after["heatmap"], before["heatmap"])


def _set_slider(page, label: str, value: int) -> None:
    box = page.get_by_label(f"number input for {label}")
    box.fill(str(value))
    box.press("Enter")
    page.wait_for_function("([l, v]) => document.querySelector(`input[aria-label='range slider for ${l}']`)"
                           ".value === String(v)", arg=[label, value], timeout=10_000)


def test_a_depth_16_tree_is_readable_and_scrolls_sideways(page, app_url, scene_png, out_dir):
    open_app(page, app_url)
    page.get_by_role("tab", name="Settings").click()
    for label, value in DEEP_TREE.items():
        _set_slider(page, label, value)
    page.get_by_role("tab", name="Input").click()
    ask(page, scene_png, SCENE.question)
    tree = page.locator("#fv-tree .fv-tree")
    assert "depth 16" in tree.locator(".fv-tcol").all_inner_texts()
    # every label keeps its size at every depth: token, probability / verdict, badge, header
    sizes = tree.locator(".fv-tnode b, .fv-tnode i, .fv-tcol").evaluate_all(
        "els => els.map(e => parseFloat(getComputedStyle(e).fontSize))")
    assert len(sizes) > 3 * 16 and min(sizes) >= MIN_LABEL_PX
    widths = {round(b["width"]) for b in tree.locator(".fv-tnode").evaluate_all(
        "els => els.map(e => e.getBoundingClientRect().toJSON())")}
    assert len(widths) == 1 and widths.pop() >= 100                     # one fixed column width
    # wider than its box: it scrolls sideways instead of shrinking, and the deepest node comes into view
    scroller = tree.locator(".fv-tscroll")
    box = scroller.evaluate("e => ({sw: e.scrollWidth, cw: e.clientWidth, ox: getComputedStyle(e).overflowX})")
    assert box["sw"] > box["cw"] and box["ox"] in ("auto", "scroll")
    deepest = tree.locator(".fv-tnode[style*='grid-column:17;']").first
    assert not _inside(deepest, scroller)
    deepest.scroll_into_view_if_needed()
    assert scroller.evaluate("e => e.scrollLeft") > 0 and _inside(deepest, scroller)
    shot = out_dir / "tree_depth16.png"
    tree.screenshot(path=str(shot))
    assert Image.open(shot).size[0] > 600


def _inside(node, scroller) -> bool:
    """Is the node's box wholly within the scroll container's visible box?"""
    a, b = node.bounding_box(), scroller.bounding_box()
    return (a["x"] >= b["x"] - 1 and a["x"] + a["width"] <= b["x"] + b["width"] + 1
            and a["y"] >= b["y"] - 1 and a["y"] + a["height"] <= b["y"] + b["height"] + 1)


# ---- the diffusion view ---------------------------------------------------------------------------
DIFFUSION_SAMPLE = make_sample(1, family="chart", task="value", split="shifted")
# a second chart/value question steered toward an answer without a number: its slot never appears, so
# CVC never fires and, on blocks of 4, BWEC commits each non-final block in one step
NO_SLOT = make_sample(2, family="chart", task="value", split="shifted")
NO_SLOT_ANSWER = "The bars of this chart carry no values."


@pytest.fixture(scope="module")
def diffusion_app_url(tiny_pipeline, steered_diffusion):
    # steered hard enough that BWEC's frozen tau_b holds (top-1 ~0.998): see test_app_diffusion_api
    assert NO_SLOT.question != DIFFUSION_SAMPLE.question
    steered = steered_diffusion({DIFFUSION_SAMPLE.question: DIFFUSION_SAMPLE.answer, NO_SLOT.question: NO_SLOT_ANSWER},
                                strength=16.0)
    demo = build_demo(tiny_pipeline, diffusion=steered)
    url = serve_in_background(demo)
    yield url
    demo.close()


def test_the_diffusion_view_draws_the_trajectory_and_says_when_cvc_fired(page, diffusion_app_url, tmp_path, out_dir):
    image = tmp_path / "chart.png"
    DIFFUSION_SAMPLE.image.save(image)
    open_app(page, diffusion_app_url)
    pick_family(page, "Diffusion with LATCH")
    assert not page.locator("#fv-run").is_visible() and not page.locator("#fv-answer").is_visible()
    page.set_input_files("#fv-image input[type=file]", str(image))
    page.wait_for_selector("#fv-image img", timeout=30_000)
    page.fill("#fv-question textarea", DIFFUSION_SAMPLE.question)
    page.press("#fv-question textarea", "Shift+Enter")             # submit: runs the family shown
    page.wait_for_selector("#fv-diffusion-metrics .fv-head-item", timeout=180_000)
    # the grid, on the tuned blocks: a row per denoising step (the span settles at step 1; until it has held
    # the frozen stable_steps, each step commits as usual: BWEC a block where blocks are longer than 1, the
    # schedule one position on blocks of 1; then CVC stops), a cell per position
    stable = FROZEN_LATCH.stable_steps
    before = "bwec" if FROZEN_BLOCK_LENGTH > 1 else "schedule"
    rows = page.locator("#fv-diffusion-grid .fv-drow[data-step]")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.rule)") == [before] * (stable - 1) + ["cvc"]
    assert rows.nth(0).locator(".fv-dc").count() == 48
    cvc = page.locator("#fv-diffusion-grid .fv-drow[data-rule=cvc]")
    assert cvc.is_visible() and "CVC fires" in cvc.locator(".fv-dlabel").inner_text()
    assert cvc.locator(".fv-dc.fv-dspan").count() > 0                 # the candidate span, outlined
    stop = page.inner_text("#fv-diffusion-stop")
    assert f"CVC fired at step {stable} of the full schedule's 48" in stop
    # every token reads at WCAG AA contrast on its confidence shade
    ratios = page.locator("#fv-diffusion-grid .fv-dc").evaluate_all(_CONTRAST)
    assert min(r["ratio"] for r in ratios) >= 4.5, min(ratios, key=lambda r: r["ratio"])
    # the headline's timed speedup over the full schedule is the table's
    head = page.locator("#fv-diffusion-metrics .fv-head-item[data-versus=full]").get_attribute("data-speedup")
    cell = page.locator("#fv-diffusion-metrics tr.fv-timed-speedup td").first.inner_text()
    assert cell.split("×")[0] == head
    page.locator("#fv-diffusion-view").screenshot(path=str(out_dir / "diffusion_tiny.png"))
    # blocks of 4, on a question whose slot never appears: BWEC's block commits are labelled rows
    page.click("#fv-block-length input")
    page.get_by_role("option", name="4", exact=True).click()
    page.fill("#fv-question textarea", NO_SLOT.question)
    page.click("#fv-run-diffusion")
    page.wait_for_selector("#fv-diffusion-grid .fv-drow[data-rule=bwec]", timeout=180_000)
    page.wait_for_selector("#fv-diffusion-metrics .fv-head-item", timeout=180_000)
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.rule)") == ["bwec"] * 11 + ["schedule"] * 4
    assert rows.nth(0).locator(".fv-dc.fv-dnew").count() == 4
    assert "BWEC · block 0" in rows.nth(0).locator(".fv-dlabel").inner_text()
    stop = page.inner_text("#fv-diffusion-stop")
    assert "BWEC committed block 0 at step 1 (4 positions at once)" in stop and "slot never appeared" in stop


def test_without_a_diffusion_model_the_view_says_what_is_missing_and_clears_the_last_results(page, app_url):
    open_app(page, app_url)
    page.set_input_files("#fv-image input[type=file]", "assets/examples/scene_colour.png")
    page.wait_for_selector("#fv-image img", timeout=30_000)
    page.fill("#fv-question textarea", "Where is the orange triangle?")
    page.press("#fv-question textarea", "Shift+Enter")             # FOVEA's Run, the family shown
    page.wait_for_selector("#fv-metrics .fv-head-item", timeout=180_000)
    pick_family(page, "Diffusion with LATCH")
    notice = page.locator("#fv-diffusion-notice .fv-dmissing")
    assert notice.is_visible()
    text = notice.inner_text()
    assert "No diffusion model is loaded" in text and "python -m fovea.train diffusion" in text
    assert "docs/latch.md" in text and "--diffusion <folder>" in text
    page.click("#fv-run-diffusion")                                 # refused in the app's words, no crash
    page.locator(".toast-message-text", has_text="No diffusion model is loaded").wait_for(timeout=30_000)
    assert page.locator("#fv-diffusion-grid .fv-drow").count() == 0 and notice.is_visible()
    pick_family(page, "FOVEA speculative")                          # the earlier FOVEA run was cleared
    page.wait_for_function("document.querySelectorAll('#fv-answer .fv-tok').length === 0", timeout=30_000)
    assert page.locator("#fv-metrics .fv-head-item").count() == 0
