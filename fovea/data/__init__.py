"""Procedural (image, question, answer) samples for training a tiny VLM from
scratch: coloured shape scenes, text to read, and bar charts, with object
masks, answer-to-object mentions and dense per-patch labels.

Pure numpy + Pillow; knows nothing about models or tokenizers.
"""
from fovea.data.generate import (
    EVAL_SEED_START,
    FAMILIES,
    TASKS,
    TUNE_SEED_START,
    eval_seeds,
    iter_corpus_text,
    make_conversation,
    make_sample,
    save_examples,
    train_seeds,
    tuning_seeds,
)
from fovea.data.labels import CHARSET, COLOURS, NUM_LABELS, SHAPES
from fovea.data.sample import (CANVAS, GRID, IGNORE, IMAGE_SIZE, PATCH, SPLITS, STYLES, Conversation, Mention, Obj,
                               Sample, letterbox)

__all__ = [
    "CANVAS", "CHARSET", "COLOURS", "Conversation", "SPLITS", "STYLES", "letterbox", "EVAL_SEED_START", "FAMILIES", "GRID", "IGNORE", "IMAGE_SIZE", "NUM_LABELS", "PATCH",
    "SHAPES", "TASKS", "TUNE_SEED_START", "Mention", "Obj", "Sample", "eval_seeds", "iter_corpus_text", "make_conversation", "make_sample",
    "save_examples", "train_seeds", "tuning_seeds",
]
