"""Drive the app in headless Chromium (Playwright + Debian's `chromium`): run a request, move the
scrubber, click a token, and capture the main view, the focus-shift view and the diffusion view.

`python -m app.screenshots [--out assets/screenshots]` launches the app on the bundled model
(or a tiny random one when the assets are missing, or with --tiny-random) and writes
main.png and focus_shifts.png; then diffusion.png, the diffusion view on the same input, when a
diffusion model folder exists (`--diffusion`, default assets/diffusion; it says when it skipped).
The browser test reuses these helpers. Not imported by the app.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from playwright.sync_api import Browser, Page, Playwright, sync_playwright

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORT = {"width": 1440, "height": 1000}


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def launch_browser(pw: Playwright) -> Browser:
    return pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)


def run_request(page: Page, url: str, image: str | Path, question: str, timeout_ms: int = 180_000) -> None:
    """Open the app, upload, type, press Run, and wait for the streamed answer and the speedup."""
    open_app(page, url)
    ask(page, image, question, timeout_ms)


def open_app(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#fv-run", timeout=60_000)


def ask(page: Page, image: str | Path, question: str, timeout_ms: int = 180_000) -> None:
    """On an open app (Input tab): upload, type, press Run, wait for the answer and the speedup."""
    page.set_input_files("#fv-image input[type=file]", str(image))
    page.wait_for_selector("#fv-image img", timeout=30_000)
    page.fill("#fv-question textarea", question)
    page.click("#fv-run")
    page.wait_for_selector("#fv-answer .fv-tok", timeout=timeout_ms)
    page.wait_for_selector("#fv-metrics .fv-head-item", timeout=timeout_ms)      # the timed speedups


def caption(page: Page) -> str:
    return page.inner_text("#fv-caption")


# JS: the focus step number in the caption ("Step 4 / 11" -> 4), or -1
_STEP_JS = "(() => { const m = document.querySelector('#fv-caption').innerText.match(/Step (\\d+) \\//); " \
           "return m ? Number(m[1]) : -1; })()"


def focus_step(page: Page) -> int:
    return page.evaluate(_STEP_JS)


def _wait_step_change(page: Page, before: int) -> str:
    page.wait_for_function(f"(b) => {{ const s = {_STEP_JS}; return s > 0 && s !== b; }}", arg=before,
                           timeout=30_000)
    return caption(page)


def scrub_by(page: Page, steps: int) -> str:
    """Move the scrubber `steps` to the right with the keyboard; wait for that step's caption."""
    slider = page.locator("#fv-scrubber input[type=range]")
    target = int(float(slider.input_value())) + steps
    slider.focus()
    for _ in range(steps):
        slider.press("ArrowRight")
    page.wait_for_function(f"(t) => {_STEP_JS} === t", arg=target + 1, timeout=30_000)
    return caption(page)


def click_token(page: Page, expect_step: int, selector: str = "#fv-answer .fv-tok[data-iter]") -> str:
    """Click the last clickable answer token; wait for the focus view to show `expect_step`."""
    page.locator(selector).last.click()
    page.wait_for_function(f"(t) => {_STEP_JS} === t", arg=expect_step, timeout=30_000)
    return caption(page)


def play(page: Page) -> str:
    """Press Play, wait until the player has advanced a step, press Pause."""
    before = focus_step(page)
    page.get_by_role("button", name="▶ Play").click()
    text = _wait_step_change(page, before)
    page.get_by_role("button", name="❚❚ Pause").click()
    return text


def capture(page: Page, out: Path) -> dict[str, Path]:
    """Screenshots of the Focus tab (main view) and of the Focus shifts tab."""
    out.mkdir(parents=True, exist_ok=True)
    shots = {"main": out / "main.png", "focus_shifts": out / "focus_shifts.png"}
    page.wait_for_timeout(500)                        # let the last image swap paint
    page.screenshot(path=str(shots["main"]), full_page=True)
    page.get_by_role("tab", name="Focus shifts").click()
    page.wait_for_selector("#fv-focus-plot .js-plotly-plot", timeout=30_000)
    page.wait_for_selector("#fv-filmstrip img", timeout=30_000)
    page.wait_for_timeout(800)
    page.screenshot(path=str(shots["focus_shifts"]), full_page=True)
    page.get_by_role("tab", name="Focus").first.click()
    return shots


def pick_family(page: Page, family: str) -> None:
    """Choose a decoding family ("FOVEA speculative" or "Diffusion with LATCH"); wait for its Run."""
    page.locator("#fv-family").get_by_label(family).check()
    run = "#fv-run-diffusion" if family.startswith("Diffusion") else "#fv-run"
    page.wait_for_selector(run, state="visible", timeout=10_000)


def capture_diffusion(page: Page, out: Path, timeout_ms: int = 600_000) -> Path:
    """The diffusion view on the input already in the boxes: switch family, Run, wait for the timed
    headline, capture the view; then back to FOVEA."""
    pick_family(page, "Diffusion with LATCH")
    page.click("#fv-run-diffusion")
    page.wait_for_selector("#fv-diffusion-metrics .fv-head-item", timeout=timeout_ms)
    page.wait_for_timeout(500)
    shot = out / "diffusion.png"
    page.locator("#fv-diffusion-view").screenshot(path=str(shot))
    pick_family(page, "FOVEA speculative")
    return shot


def main(argv: list[str] | None = None) -> None:
    from app.diffusion_view import DIFFUSION_TRAIN_COMMAND
    from app.ui import EXAMPLES_DIR, build_demo, load_examples, serve_in_background
    from fovea.diffusion import DEFAULT_DIFFUSION_DIR, load_diffusion
    from fovea.pipeline import FoveaPipeline

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "assets" / "screenshots")
    p.add_argument("--tiny-random", action="store_true")
    p.add_argument("--example", type=int, default=0, help="index into assets/examples/examples.json")
    p.add_argument("--diffusion", type=Path, default=DEFAULT_DIFFUSION_DIR,
                   help="masked-diffusion model folder for diffusion.png (skipped when it does not exist)")
    args = p.parse_args(argv)
    try:
        pipeline = FoveaPipeline.tiny_random() if args.tiny_random else FoveaPipeline.from_pretrained()
    except (FileNotFoundError, OSError) as err:
        print(f"bundled model unavailable ({err}); using a tiny random one")
        pipeline = FoveaPipeline.tiny_random()
    diffusion = load_diffusion(args.diffusion) if args.diffusion.exists() else None
    if diffusion is None:
        print(f"skipped the diffusion view: no diffusion model at {args.diffusion} "
              f"(`{DIFFUSION_TRAIN_COMMAND}` builds one; see docs/latch.md)")
    image, question = load_examples(EXAMPLES_DIR)[args.example]
    demo = build_demo(pipeline, diffusion=diffusion, diffusion_folder=args.diffusion)
    url = serve_in_background(demo)
    try:
        with sync_playwright() as pw:
            browser = launch_browser(pw)
            page = browser.new_page(viewport=VIEWPORT)
            run_request(page, url, image, question)
            scrub_by(page, 3)
            for path in capture(page, args.out).values():
                print(path)
            if diffusion is not None:
                print(capture_diffusion(page, args.out))
            browser.close()
    finally:
        demo.close()


if __name__ == "__main__":
    main()
