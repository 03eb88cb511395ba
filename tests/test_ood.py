"""The out-of-distribution score separates the synthetic world from photo-like images: its
threshold holds on generated images of both splits (and their JPEGs) and on procedural photo-like
images, all drawn from seeds the measurement in assets/results/ood.json did not use."""
import io

from PIL import Image

from fovea.analysis.ood import PHOTO_KINDS, generated_images, photo_like
from fovea.ood import WORLD_THRESHOLD, check_world, palette_coverage


def test_generated_images_of_both_splits_are_in_world():
    checks = [(split, family, check_world(image)) for split, family, image in generated_images(8, start=5000)]
    assert {s for s, _, _ in checks} == {"train", "shifted"}
    assert all(c.in_world and c.message == "" for _, _, c in checks), [(s, f, c.coverage) for s, f, c in checks
                                                                       if not c.in_world]


def test_a_generated_image_saved_as_jpeg_or_letterboxed_stays_in_world():
    _, _, image = next(generated_images(1, start=6000))
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    assert check_world(Image.open(buf)).in_world
    wide = Image.new("RGB", (image.width * 2, image.height), (255, 255, 255))
    wide.paste(image, (0, 0))
    assert check_world(wide).in_world


def test_photo_like_images_of_every_kind_get_the_warning_pointing_to_a_real_backbone():
    checks = [check_world(photo_like(seed)) for seed in range(10_000, 10_000 + 4 * len(PHOTO_KINDS))]
    assert not any(c.in_world for c in checks), [c.coverage for c in checks]
    assert "trained only on that world" in checks[0].message and "--target" in checks[0].message


def test_coverage_is_one_for_flat_images_and_tiny_for_noise():
    assert palette_coverage(Image.new("RGB", (50, 30), (10, 200, 30))) == 1.0
    assert palette_coverage(photo_like(0)) < 0.05 < WORLD_THRESHOLD         # seed 0 is white noise


def test_a_flat_image_gets_a_notice_and_no_generated_image_does():
    from fovea.ood import FLAT_SHARE

    flat = check_world(Image.new("RGB", (200, 120), (128, 128, 128)))
    assert flat.flat and "flat colour" in flat.flat_message
    checks = [check_world(image) for _, _, image in generated_images(8, start=7000)]
    assert not any(c.flat for c in checks) and max(c.top_share for c in checks) < FLAT_SHARE


def test_a_question_mostly_outside_the_vocabulary_gets_a_notice():
    from transformers import AutoTokenizer

    from fovea.models.bundled import DEFAULT_TARGET_DIR
    from fovea.ood import question_message, unknown_word_share

    tok = AutoTokenizer.from_pretrained(DEFAULT_TARGET_DIR)               # the shipped target's tokenizer

    def share(question: str) -> float:
        return unknown_word_share(question, lambda text: tok.encode(text, add_special_tokens=False))
    assert share("How many red circles are there?") == 0.0 and question_message(0.0) == ""
    for question in ("Wie viele rote Kreise gibt es?", "这张图片里有什么？"):
        assert "unknown to the model's vocabulary" in question_message(share(question)), question


def test_the_notices_keep_their_placeholders_as_text():
    from app.views import ood_html

    out = ood_html(check_world(photo_like(3)), unknown_words=0.9)
    assert "&lt;LLaVA-NeXT or Qwen2.5-VL folder&gt;" in out and out.count('role="alert"') == 2
