"""Does an image look like the bundled model's synthetic world? A measured image statistic.

The procedural world (`fovea.data`) paints flat colours on flat backgrounds: a dozen colours (at 5
bits per channel) cover at least 95.8% of every generated image, train and shifted splits alike
(1,200 images), while 1,199 of 1,200 procedural photo-like images (noise, skies, textures, smooth
blobs) stay under 72% (`python -m fovea.analysis.ood --n 200`, assets/results/ood.json; the one
miss is a near-flat blob picture at 84%). A generated image saved as a JPEG at quality 90 drops to
0.74-0.91, so the threshold sits just below that. `palette_coverage` is that share; below
`WORLD_THRESHOLD` the upload is out of distribution for the bundled model and its answers are
guesses. The statistic says nothing about a real backbone, which was trained on photos.

Two more notices a user gets: a *flat* image, one colour over at least FLAT_SHARE of it (the most
uniform of 1,800 generated images of both splits has 99.1% in its background colour), gives the
model nothing to look at; and a question whose words are mostly *unknown* to the tokenizer (split
into more than one piece per two characters: with the bundled tokenizer every word of the world's
questions is one piece, German ones 3-5 pieces, a Chinese sentence 27).
Pure numpy + Pillow; knows nothing about models (a tokenizer's `encode` comes in).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

TOP_COLOURS = 12
BITS = 5                   # per channel: 32 levels merge anti-aliasing and JPEG noise, keep real shading apart
WORLD_THRESHOLD = 0.72     # generated >= 0.958, their JPEGs >= 0.743; photo-like: 1 of 1,200 above (ood.json)
_ANALYSIS_SIDE = 256       # larger uploads are scaled down first (nearest: no new colours)
FLAT_SHARE = 0.998         # one colour over this share of the image: nothing to look at
PIECES_PER_CHAR = 0.5      # a word the tokenizer splits finer than this is unknown to the model
UNKNOWN_WORDS_SHARE = 0.5  # above this share of unknown words the question gets a notice


def palette_coverage(image: Image.Image, top: int = TOP_COLOURS) -> float:
    """Share of pixels covered by the `top` most frequent colours, quantised to BITS per channel."""
    return float(_colour_counts(image)[:top].sum())


def _colour_counts(image: Image.Image) -> np.ndarray:
    """Share of the image in each colour (quantised to BITS per channel), most frequent first."""
    image = image.convert("RGB")
    if max(image.size) > _ANALYSIS_SIDE:
        scale = _ANALYSIS_SIDE / max(image.size)
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))),
                             Image.NEAREST)
    a = (np.asarray(image, dtype=np.uint8) >> (8 - BITS)).astype(np.int32)           # [H, W, 3]
    codes = (a[..., 0] << (2 * BITS)) | (a[..., 1] << BITS) | a[..., 2]              # one code per colour
    counts = np.bincount(codes.ravel(), minlength=1 << (3 * BITS))
    return np.sort(counts)[::-1] / codes.size


@dataclass(frozen=True)
class WorldCheck:
    coverage: float            # palette_coverage of the image
    in_world: bool             # coverage >= WORLD_THRESHOLD
    top_share: float = 0.0     # share of the single most frequent colour

    @property
    def flat(self) -> bool:
        return self.top_share >= FLAT_SHARE

    @property
    def flat_message(self) -> str:
        if not self.flat:
            return ""
        return (f"This image is almost one flat colour ({self.top_share:.1%} of it): there is little for the "
                "model to look at, so its answer says more about the question than about the image.")

    @property
    def message(self) -> str:
        if self.in_world:
            return ""
        return (f"This image does not look like the bundled model's synthetic world: a dozen flat colours "
                f"cover {self.coverage:.0%} of it (generated scenes, text and charts: 95% or more). The bundled "
                "model was trained only on that world, so its answer is a guess; the decoding itself is still "
                "shown faithfully. For photos, start the app with a real backbone: "
                "python app.py --target <LLaVA-NeXT or Qwen2.5-VL folder> --drafter <drafter trained for it>.")


def check_world(image: Image.Image) -> WorldCheck:
    shares = _colour_counts(image)
    coverage = float(shares[:TOP_COLOURS].sum())
    return WorldCheck(coverage, coverage >= WORLD_THRESHOLD, float(shares[0]))


def unknown_word_share(question: str, encode) -> float:
    """Share of the question's words that `encode(text) -> ids` splits into more than one piece and
    more than PIECES_PER_CHAR pieces per character, with or without a leading space (punctuation
    stripped); 0.0 for no words."""
    words = [w.strip(".,;:!?\"'()") for w in question.split()]
    words = [w for w in words if w]
    unknown = [w for w in words
               if min(len(encode(w)), len(encode(" " + w))) > max(1.0, PIECES_PER_CHAR * len(w))]
    return len(unknown) / len(words) if words else 0.0


def question_message(share: float) -> str:
    """The notice for a question whose words are mostly unknown to the model ("" otherwise)."""
    if share <= UNKNOWN_WORDS_SHARE:
        return ""
    return (f"Most words of this question ({share:.0%}) are unknown to the model's vocabulary (another language, "
            "or words its training never used); expect an answer that ignores them.")
