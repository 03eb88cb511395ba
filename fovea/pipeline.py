"""`FoveaPipeline`: one object that validates user input, holds a target + drafter(s), and runs
FOVEA or autoregressive decoding as a stream of trace records.

This is the entry point the app, the CLI and the benchmarks share. It never imports gradio;
bad input raises `InputError`, whose message is a sentence telling the user what to do, and an
unusable checkpoint raises `fovea.checkpoints.CheckpointError`, worded the same way.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Iterator

import torch
from PIL import Image, UnidentifiedImageError

from fovea.checkpoints import check_drafter_fits_target, check_target_reference
from fovea.config import CorrectionConfig, FoveaConfig
from fovea.candidates import AssistantLM, PromptLookup, TreeDrafter
from fovea.decoding import generate, run
from fovea.drafter import Drafter, drafter_config_for
from fovea.methods import CONTEXTS, FOVEA, FULL, Method
from fovea.models import bundled
from fovea.ood import unknown_word_share
from fovea.trace import Accumulator, GenerationResult

MAX_IMAGE_PIXELS = 40_000_000        # ~6300 x 6300; larger uploads are refused before decoding
MIN_IMAGE_SIDE = 8
MAX_QUESTION_CHARS = 500
MAX_NEW_TOKENS_CAP = 256


class InputError(ValueError):
    """User input that cannot be decoded; the message says what to do instead."""


def open_image(image) -> Image.Image:
    """A path, bytes-like file or PIL image -> RGB PIL image (first frame of animations)."""
    if image is None:
        raise InputError("Please upload an image (PNG, JPEG, GIF, BMP or WebP) or pick an example.")
    if isinstance(image, (str, os.PathLike)):
        if not Path(image).is_file():
            raise InputError(f"Could not find the image file {Path(image).name!r}; please upload it again.")
        try:
            with Image.open(image) as im:
                return _to_rgb(im)
        except InputError:
            raise
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as err:
            raise InputError(_unreadable(err)) from err
    if isinstance(image, Image.Image):
        return _to_rgb(image)
    if hasattr(image, "shape"):                # numpy array from a UI component
        try:
            return _to_rgb(Image.fromarray(image))
        except (TypeError, ValueError) as err:
            raise InputError("That array is not an image; please upload a PNG or JPEG file.") from err
    raise InputError("Unsupported image input; please upload a PNG or JPEG file.")


def _unreadable(err: Exception) -> str:
    if isinstance(err, Image.DecompressionBombError):
        return "That image is too large to process; please upload one under 6000 x 6000 pixels."
    return "That file could not be read as an image (it may be truncated or not an image); please upload a PNG or JPEG."


def _to_rgb(im: Image.Image) -> Image.Image:
    w, h = im.size
    if w * h > MAX_IMAGE_PIXELS:
        raise InputError(f"That image is {w} x {h} pixels, too large to process; "
                         "please upload one under 6000 x 6000 pixels.")
    if min(w, h) < MIN_IMAGE_SIDE:
        raise InputError(f"That image is only {w} x {h} pixels; please upload one at least "
                         f"{MIN_IMAGE_SIDE} x {MIN_IMAGE_SIDE} pixels.")
    try:
        im.seek(0)                              # animated GIF / APNG: first frame
        if im.mode in ("I;16", "I;16B", "I;16L", "I"):
            im = im.point(lambda v: v / 256).convert("L")   # 16-bit grayscale -> 8-bit
        if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
            rgba = im.convert("RGBA")
            flat = Image.new("RGB", rgba.size, (255, 255, 255))
            flat.paste(rgba, mask=rgba.getchannel("A"))
            return flat
        return im.convert("RGB")
    except (OSError, ValueError, SyntaxError) as err:
        raise InputError(_unreadable(err)) from err


class FoveaPipeline:
    def __init__(self, target, drafters: dict[str, Drafter]):
        self.target = target
        for name, d in drafters.items():     # a drafter for another target: one sentence, not a shape error
            check_drafter_fits_target(d, target, name)
        self.drafters = {name: d.bind(target) for name, d in drafters.items()}
        self.memory_grid = target.memory_grid
        self.image_size = target.image_size
        self.max_question_chars = MAX_QUESTION_CHARS
        self.max_new_tokens_cap = MAX_NEW_TOKENS_CAP

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, target=None, drafter=None, baseline_drafter=None) -> "FoveaPipeline":
        """A target (bundled, LLaVA-1.5, LLaVA-NeXT or Qwen2.5-VL folder or Hub id, see
        `fovea.backbones.load_backbone`) and drafter(s); None = the committed bundled assets.
        `baseline_drafter` is the no-correction twin. The other drafters (the twin, every other
        context's pair, `fovea.methods.CONTEXTS`) come from the FOVEA drafter's *set*: the folder that
        holds it, laid out as assets/ is (the folders of `fovea.methods.CONTEXTS`). The committed set
        belongs to the committed default target; another set's drafters load where they were trained
        for the loaded target (e.g. `python -m fovea.train rebuild --assets <set>`)."""
        from fovea.backbones import load_backbone
        from fovea.checkpoints import trained_for_target

        target_ref = target or os.environ.get("FOVEA_TARGET")
        if target_ref:
            check_target_reference(target_ref)
        tgt = load_backbone(target_ref) if target_ref else bundled.load_target(bundled.DEFAULT_TARGET_DIR)
        fovea_dir = Path(drafter or os.environ.get("FOVEA_DRAFTER") or bundled.ASSETS / FULL.folders[0])
        drafters = {FULL.fovea: Drafter.from_pretrained(fovea_dir)}
        default_target = isinstance(tgt, bundled.BundledTarget) and (
            not target_ref or Path(target_ref).resolve() == Path(bundled.DEFAULT_TARGET_DIR).resolve())
        set_dir = fovea_dir.parent if fovea_dir.is_dir() else None
        if set_dir is not None and set_dir.resolve() == bundled.ASSETS.resolve():
            set_dir = None

        def sibling(folder: str, built: str = "config.json") -> Drafter | None:
            """The set's drafter in `folder`, where it is built and trained for this target. In the committed
            set a folder counts as built where `built` exists in it (the twin: the folder itself)."""
            if set_dir is None:                 # the committed set: the committed default target's
                path = bundled.ASSETS / folder
                return Drafter.from_pretrained(path) if default_target and (path / built).exists() else None
            path = set_dir / folder
            if not (path / "config.json").exists():
                return None
            model = Drafter.from_pretrained(path)
            return model if trained_for_target(model, tgt) else None

        if baseline_drafter:
            if Path(baseline_drafter).exists():
                drafters[FULL.twin] = Drafter.from_pretrained(baseline_drafter)
        elif (twin := sibling(FULL.folders[1], built="")) is not None:
            drafters[FULL.twin] = twin
        for context in CONTEXTS.values():      # every other drafter context's pair, where built
            if context is FULL:
                continue
            for name, folder in context.drafter_folders.items():
                if (model := sibling(folder)) is not None:
                    drafters[name] = model
        return cls(tgt, drafters)

    @classmethod
    def tiny_random(cls, seed: int = 0) -> "FoveaPipeline":
        """A random-weight tiny bundled-architecture model and an untrained drafter (tests, no assets)."""
        from fovea.data import iter_corpus_text

        tok = bundled.train_tokenizer(iter_corpus_text(300), vocab_size=400)
        sizes = dataclasses.replace(bundled.BundledModelConfig.from_name("tiny"), vocab_size=len(tok))
        model = bundled.build_model(sizes, tok, seed=seed)
        target = bundled.BundledTarget(model, tok)
        torch.manual_seed(seed)
        off = CorrectionConfig(enabled=False)
        drafters = {}
        for context in CONTEXTS.values():        # an untrained pair per drafter context
            cfg = drafter_config_for(target, context=context.name)
            drafters[context.fovea], drafters[context.twin] = Drafter(cfg).eval(), Drafter(cfg, off).eval()
        return cls(target, drafters)

    # ---- validation --------------------------------------------------------------------------
    def validate_image(self, image) -> Image.Image:
        return open_image(image)

    def validate_question(self, question) -> str:
        if question is None or not str(question).strip():
            raise InputError("Please type a question about the image.")
        question = " ".join(str(question).split())
        if len(question) > self.max_question_chars:
            raise InputError(f"That question is {len(question)} characters long; please keep it under "
                             f"{self.max_question_chars} characters.")
        return question

    def validate_config(self, config: FoveaConfig) -> FoveaConfig:
        n = config.decoding.max_new_tokens
        if not 1 <= n <= self.max_new_tokens_cap:
            raise InputError(f"Max new tokens must be between 1 and {self.max_new_tokens_cap}, got {n}.")
        return config

    # ---- decoding ----------------------------------------------------------------------------
    def strategy(self, method: Method, assistant=None):
        """The drafting strategy of `method` (`fovea.methods`; None for autoregressive decoding): FOVEA,
        its ablations and the chain are TreeDrafters over a loaded drafter with the method's config
        overrides; prompt lookup and the assistant LM (`assistant`) are their own strategies."""
        if method.kind == "autoregressive":
            return None
        if method.kind == "prompt_lookup":
            return PromptLookup(method.name)
        if method.kind == "assisted":
            if assistant is None:
                raise InputError(f"Method {method.name} needs an assistant LM (see --assistant).")
            return AssistantLM(assistant, method.name)
        if method.kind != "fovea":
            raise InputError(f"Method {method.name} ({method.kind}) does not run in this decode loop.")
        if method.drafter not in self.drafters:
            raise InputError(f"Method {method.name} needs the drafter {method.drafter!r}, which is not loaded; "
                             f"available: {sorted(self.drafters)}.")
        return TreeDrafter(method.name, self.drafters[method.drafter], method.overrides)

    def request(self, image, question, config: FoveaConfig, method: Method):
        """(strategy, prompt, config) of one request, every input checked (InputError otherwise)."""
        img, q, cfg = self.validate_image(image), self.validate_question(question), self.validate_config(config)
        strategy = self.strategy(method)
        return strategy, self.target.prepare(img, q), cfg

    def stream(self, image, question, config: FoveaConfig, method: Method = FOVEA) -> Iterator:
        """Yield the trace records of one request (a PrefillTrace, then one per round or step)."""
        yield from generate(self.target, *self.request(image, question, config, method))

    def accumulator(self, method: Method = FOVEA) -> Accumulator:
        """An empty Accumulator for this pipeline's records of `method` (knows the memory grid)."""
        return Accumulator(method.name, self.memory_grid)

    def result(self, acc: Accumulator) -> GenerationResult:
        """The GenerationResult of a folded run, with its text decoded."""
        return acc.result(self.target.tokenizer.decode(acc.tokens, skip_special_tokens=True))

    def generate(self, image, question, config: FoveaConfig, method: Method = FOVEA) -> GenerationResult:
        """One request decoded and folded (`fovea.decoding.run`)."""
        return run(self.target, *self.request(image, question, config, method))

    def token_strings(self, ids: list[int]) -> list[str]:
        """Display text of each token (byte-level pieces decoded one by one): "" for a special token
        (`</s>`: never shown), and a visible stand-in, the id, for any other token that decodes to nothing."""
        tok = self.target.tokenizer
        special = set(tok.all_special_ids)
        return ["" if i in special else tok.decode([i]) or f"⟨{i}⟩" for i in ids]

    def unknown_word_share(self, question: str) -> float:
        """Share of the question's words unknown to the tokenizer (`fovea.ood.unknown_word_share`)."""
        return unknown_word_share(question, lambda text: self.target.tokenizer.encode(text, add_special_tokens=False))

    def random_example(self, family: str, seed: int) -> tuple[Image.Image, str]:
        from fovea.data import FAMILIES, make_sample

        if family not in FAMILIES:
            raise InputError(f"Unknown example family {family!r}; choose one of {', '.join(FAMILIES)}.")
        s = make_sample(seed, family=family)
        return s.image, s.question

