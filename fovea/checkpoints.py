"""Checks that turn an unusable checkpoint into one sentence (what is wrong, what to do) before a
loader would fail with a library traceback.

The loaders call these: `Drafter.from_pretrained` (weights file, config vs weights, an adapter's base),
`fovea.models.bundled.load_target` (weights files, tokenizer), `FoveaPipeline` (a drafter bound
to a target it was not built for) and `TreeDrafter` (a request that enables the correction on a drafter
saved without its correction weights). Everything is read from file headers and config values, so a
check costs milliseconds and never loads a tensor; the exceptions are `target_fingerprint`, a hash
of the loaded target's LM head (~1 ms), and `tensors_fingerprint`, a hash of the base tensors an adapter
drafter loads (~2 ms). Knows nothing about decoding.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

SAFETENSORS_HEADER_BYTES = 8        # little-endian u64: the JSON header's length
MAX_HEADER_BYTES = 100_000_000      # safetensors' own limit on the JSON header
# what a transformers tokenizer can be rebuilt from, any one of these sets
TOKENIZER_FILE_SETS = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"), ("vocab.txt",))
RETRAIN_DRAFTER = "`python -m fovea.train drafter --target <target folder>`"
REBUILD = {"drafter": RETRAIN_DRAFTER, "target": "`python -m fovea.train target`"}


class CheckpointError(ValueError, OSError):
    """A checkpoint that cannot be used; the message is one sentence saying what is wrong and what to do.

    A ValueError (the files' contents are wrong) and an OSError, as `BackboneError` and transformers'
    own loading errors are, so callers that already catch OSError (app.py) report it too."""


def safetensors_shapes(path: Path, what: str) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from a safetensors file's header, after checking that the file is
    complete: header length, JSON header, and data region ending exactly at the end of the file."""
    path = Path(path)
    size = path.stat().st_size
    redo = f"copy it again from where it was built, or rebuild it with {REBUILD.get(what, 'its trainer')}"
    with path.open("rb") as f:
        head = f.read(SAFETENSORS_HEADER_BYTES)
        n = int.from_bytes(head, "little") if len(head) == SAFETENSORS_HEADER_BYTES else -1
        if n < 0 or n > MAX_HEADER_BYTES or SAFETENSORS_HEADER_BYTES + n > size:
            raise CheckpointError(f"The {what} weights file {path} is truncated or not a safetensors file "
                                  f"(its header is cut off at {size} bytes); {redo}.")
        raw = f.read(n)
    try:
        header = json.loads(raw)
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        shapes = {k: tuple(int(d) for d in v["shape"]) for k, v in tensors.items()}
        data_end = max((int(v["data_offsets"][1]) for v in tensors.values()), default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
        raise CheckpointError(f"The {what} weights file {path} has a corrupt header ({type(err).__name__}); "
                              f"{redo}.") from err
    expected = SAFETENSORS_HEADER_BYTES + n + data_end
    if size < expected:
        raise CheckpointError(f"The {what} weights file {path} is truncated ({size:,} of {expected:,} bytes); "
                              f"{redo}.")
    if size > expected:
        raise CheckpointError(f"The {what} weights file {path} has {size - expected:,} bytes after its last "
                              f"tensor, so it is corrupt; {redo}.")
    return shapes


def check_weight_files(folder: Path, what: str) -> None:
    """Every *.safetensors file in a checkpoint folder is complete (sharded checkpoints too)."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        safetensors_shapes(path, what)


def read_config(path: Path, what: str) -> dict:
    """A checkpoint's config.json as a dict, or one sentence saying it is unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"The {what} config {path} is not valid JSON ({err.__class__.__name__}); put back "
                              f"the config.json saved with the {what}.") from err


def config_error(path: Path, what: str, err: Exception) -> CheckpointError:
    """The sentence for a config.json that parses but does not describe a `what` (missing section,
    unknown key, out-of-range value)."""
    if isinstance(err, KeyError):
        reason = f"no {err.args[0]!r} section"
    else:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    return CheckpointError(f"The {what} config {path} is not a FOVEA {what} config ({reason}); put back the "
                           f"config.json saved with the {what}.")


def check_state_shapes(model, path: Path, what: str, optional: tuple[str, ...] = (),
                       base: dict[str, tuple[int, ...]] | None = None) -> None:
    """The weights in `path` fit `model` as its config built it: same tensor names, same shapes;
    tensors whose names start with one of `optional` may be missing. `base`: name -> shape of the
    tensors an adapter loads from its base folder, checked as if they were in `path`."""
    stored = {**(base or {}), **safetensors_shapes(path, what)}
    wanted = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    problems = [f"{k} is {_dims(stored[k])} in the weights but {_dims(v)} in the model its config builds"
                for k, v in wanted.items() if k in stored and stored[k] != v]
    problems += [f"{k} is missing from the weights" for k in wanted if k not in stored and not k.startswith(optional)]
    problems += [f"{k} in the weights has no place in the model" for k in stored if k not in wanted]
    if problems:
        more = f" (and {len(problems) - 1} more tensors differ)" if len(problems) > 1 else ""
        raise CheckpointError(f"The {what} at {Path(path).parent} does not match its config.json: {problems[0]}"
                              f"{more}; put back the config.json saved with these weights, or retrain it with "
                              f"{RETRAIN_DRAFTER}.")


def tensors_fingerprint(state: dict) -> str:
    """16 hex digits naming a set of saved tensors bit for bit: a hash of their names, dtypes, shapes and
    bytes in name order (the base an adapter drafter names, `Drafter.save_pretrained`)."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name};{tensor.dtype};{list(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def adapter_base_error(folder: Path, base: Path, problem: str) -> CheckpointError:
    """The sentence for a drafter stored as an adapter whose base folder (named in its config.json) is
    missing or holds other weights (`problem`)."""
    return CheckpointError(f"The drafter at {folder} is stored as an adapter of the drafter at {base}, {problem}; "
                           "keep the base it was saved with beside it (copy the two folders together), or save "
                           "the drafter with its full weights (`Drafter.save_pretrained` without `base`).")


class TargetMismatchWarning(UserWarning):
    """A drafter trained with another target of the same shape: decoding stays lossless (the target
    verifies every token) but acceptance, so speed, is whatever that mismatch leaves."""


def target_fingerprint(target) -> str:
    """16 hex digits naming a target's weights: a hash of its LM head in float16 (the dtype the
    bundled checkpoints are saved in, so a reload hashes the same). Any training step changes it."""
    import torch

    head = target.lm_head_weight.detach().to("cpu", dtype=torch.float16).contiguous()
    return hashlib.sha256(head.numpy().tobytes()).hexdigest()[:16]


def decoder_fingerprint(target, head: str | None = None) -> str | None:
    """16 hex digits naming the decoder a drafter reads: its depth, its final norm (the LM head's input,
    the drafter's feature) in float16 and its LM head (by target_fingerprint; pass it as `head` where it
    is already computed, so the head is hashed once). target_fingerprint alone did not tell a deeper
    target trained with the head frozen (target v3 from step 54,200) from its source. None where the
    backbone has no `get_decoder().norm` and `.layers` to read."""
    import torch

    recorded = getattr(target, "decoder_fingerprint", None)   # a dump's head (fovea.training.dumps.DumpHead)
    if isinstance(recorded, str):
        return recorded
    model = getattr(target, "model", None)
    try:
        decoder = model.get_decoder()
        norm, layers = decoder.norm.weight, decoder.layers
    except (AttributeError, TypeError):
        return None
    digest = hashlib.sha256(f"layers={len(layers)};head={head or target_fingerprint(target)};".encode())
    digest.update(norm.detach().to("cpu", dtype=torch.float16).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _fingerprints(drafter, target) -> tuple[str, str] | None:
    """(the fingerprint a saved drafter recorded, this target's of the same kind): the decoder's where the
    drafter recorded one, else the LM head's (drafters saved before it); None where it recorded neither."""
    if decoder := getattr(drafter, "trained_for_decoder", None):
        return decoder, decoder_fingerprint(target)
    if head := getattr(drafter, "trained_for", None):
        return head, target_fingerprint(target)
    return None


def trained_for_target(drafter, target) -> bool | None:
    """Whether a saved drafter was trained with this target (`_fingerprints`); None where it recorded none."""
    pair = _fingerprints(drafter, target)
    return None if pair is None else pair[0] == pair[1]


def check_drafter_fits_target(drafter, target, name: str = "drafter") -> None:
    """A drafter shares the target's embedding, LM head and hidden space, so its hidden size,
    vocabulary and memory width (the target's projected visual tokens) must all be the target's.
    A drafter saved with the fingerprint of the target it was trained with warns
    (TargetMismatchWarning) when bound to another target of the same shape."""
    cfg = drafter.cfg
    source = getattr(drafter, "source", None)
    where = f" at {source}" if source else ""
    if (cfg.hidden_size, cfg.vocab_size, cfg.memory_dim) == (target.hidden_size, target.vocab_size,
                                                                target.hidden_size):
        pair = _fingerprints(drafter, target)
        if pair is not None and pair[0] != pair[1]:
            recorded, this = pair
            warnings.warn(f"The drafter {name!r}{where} was trained with another target (fingerprint {recorded}, "
                          f"this one is {this}): answers stay exactly the target's, but "
                          f"fewer draft tokens will be accepted; retrain it for this target with "
                          f"{RETRAIN_DRAFTER}.", TargetMismatchWarning, stacklevel=2)
        return
    raise CheckpointError(f"The drafter {name!r}{where} was built for a target with hidden size {cfg.hidden_size}, "
                          f"a {cfg.vocab_size}-token vocabulary and {cfg.memory_dim}-wide visual tokens, but this "
                          f"target has hidden size {target.hidden_size} and a {target.vocab_size}-token "
                          f"vocabulary; load the target it was trained with, or train a drafter for this target "
                          f"with {RETRAIN_DRAFTER}.")


def check_correction_weights(drafter, correction) -> None:
    """A request (or training run) that enables the correction (`correction`, a CorrectionConfig) needs a
    drafter that holds its correction weights: one saved with the correction disabled has none (its
    memory encoder, retriever and corrector would run as initialised), so it is refused."""
    if correction.enabled and not getattr(drafter, "correction_weights", True):
        source = getattr(drafter, "source", None)
        raise CheckpointError(f"The drafter{f' at {source}' if source else ''} was saved with its correction "
                              "disabled, without the correction weights, so it cannot correct; decode it with "
                              "the correction off (a no-correction method), or use a FOVEA drafter trained with "
                              f"the correction ({RETRAIN_DRAFTER}).")


def check_tokenizer_files(folder: Path, what: str = "target") -> None:
    """The folder holds the files a fast tokenizer is rebuilt from."""
    folder = Path(folder)
    if any(all((folder / f).exists() for f in files) for files in TOKENIZER_FILE_SETS):
        return
    raise CheckpointError(f"The {what} folder {folder} has no tokenizer (no tokenizer.json); copy the tokenizer "
                          "files saved with the model (tokenizer.json and tokenizer_config.json) into it, or "
                          "re-export the model with its tokenizer.")


def check_target_reference(ref) -> None:
    """Before `load_backbone`: where `ref` is a local folder with weights, check that they are
    complete and that a tokenizer is there (load_backbone words missing folders, configs and weights)."""
    folder = Path(ref).expanduser()
    if folder.is_dir() and any(folder.glob("*.safetensors")):
        check_weight_files(folder, "target")
        check_tokenizer_files(folder, "target")


def check_target_folder(folder: Path) -> None:
    """A target folder in transformers' format: complete safetensors weights and a tokenizer."""
    folder = Path(folder)
    if not any(folder.glob("model*.safetensors")):
        raise CheckpointError(f"The target folder {folder} has no model.safetensors weights; copy the weights saved "
                              "with it into the folder, or rebuild the target with `python -m fovea.train target`.")
    check_weight_files(folder, "target")
    check_tokenizer_files(folder, "target")


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"
