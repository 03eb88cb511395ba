"""Browser test in headless Chromium (Debian `chromium` + Playwright): upload an image, type a
question, press Run, wait for the streamed answer, move the scrubber, play, click a token, and
save screenshots. Asserts the heatmap, the highlighted answer, the draft tree and the focus plot
are on the page, and that a bad input shows its message without clearing them. Screenshots go
to pytest's tmp dir, or FOVEA_SCREENSHOT_DIR when set (`python -m app.screenshots` writes the
committed ones under assets/screenshots/)."""
import os
import re
from pathlib import Path

import pytest

from app.screenshots import (VIEWPORT, capture, chromium_path, click_token, launch_browser, play, run_request,
                             scrub_by)
from app.ui import build_demo, serve_in_background
from fovea.config import FoveaConfig

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_path() is None, reason="Debian chromium is not installed (apt-get install chromium)"),
]
TOKENS = 12



@pytest.fixture(scope="module")
def app_url(tiny_pipeline):
    initial = FoveaConfig().replace(tree=dict(depth=2, top_k=2, total_tokens=4), decoding=dict(max_new_tokens=TOKENS))
    demo = build_demo(tiny_pipeline, initial=initial)
    url = serve_in_background(demo)
    yield url
    demo.close()


def test_run_scrub_click_and_screenshot(app_url, tmp_path):
    from playwright.sync_api import sync_playwright

    out = Path(os.environ.get("FOVEA_SCREENSHOT_DIR") or tmp_path)
    with sync_playwright() as pw:
        browser = launch_browser(pw)
        page = browser.new_page(viewport=VIEWPORT)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
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

        shots = capture(page, out)
        assert page.locator("#fv-focus-plot .js-plotly-plot").count() == 1

        # a bad input raises a toast and leaves the last results on the page
        page.fill("#fv-question textarea", "")
        page.click("#fv-run")
        page.get_by_text("Please type a question about the image.").wait_for(timeout=30_000)
        assert page.locator("#fv-answer .fv-tok").count() == TOKENS
        browser.close()
    assert all(p.stat().st_size > 20_000 for p in shots.values())
    assert not errors, errors
