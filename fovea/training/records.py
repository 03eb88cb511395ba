"""(image, question, answer) training records: a JSONL file plus a folder of images.

One record per line, image paths relative to the images folder (default: the JSONL's folder):
    {"image": "images/0001.png", "question": "What colour is the car?", "answer": "Red."}
`load_records` validates every line and reports the bad ones with line numbers and what to fix;
`Collator` turns records into teacher-forced batches for a target (prompt + answer + EOS, labels on
the answer only, the backbone's batched image inputs). `python -m fovea.train records` checks a
file, and with --distill-out rewrites the answers as the target's own greedy outputs (the usual
data for training a drafter). Knows nothing about drafters.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image, UnidentifiedImageError

FIELDS = ("image", "question", "answer")
MAX_REPORTED = 10


class RecordError(ValueError):
    """A records file that cannot be used; the message lists the bad lines and what to fix."""


@dataclass(frozen=True)
class Record:
    image: Path             # absolute path of the image file
    question: str
    answer: str
    line: int               # 1-based line in the JSONL, for messages


def load_records(jsonl: str | Path, images_dir: str | Path | None = None, open_images: bool = True) -> list[Record]:
    """Parse and validate a records file. Every problem is collected first, then one RecordError
    lists up to MAX_REPORTED of them. `open_images` also checks that each image decodes."""
    return [Record(path, obj["question"].strip(), obj["answer"].strip(), n)
            for obj, path, n in read_image_jsonl(jsonl, images_dir, FIELDS, open_images)]


def read_image_jsonl(jsonl: str | Path, images_dir: str | Path | None, keys: tuple[str, ...],
                     open_images: bool = True) -> list[tuple[dict, Path, int]]:
    """Validated lines of a JSONL whose objects name an image and hold non-empty strings under `keys`
    ("image" first) -> (object, absolute image path, line number); bad lines raise one RecordError."""
    jsonl = Path(jsonl)
    if not jsonl.is_file():
        shape = "{" + ", ".join(f'"{k}": ...' for k in keys) + "}"
        raise RecordError(f"No records file at {jsonl}; expected a JSONL file with one {shape} object per line.")
    root = Path(images_dir) if images_dir is not None else jsonl.parent
    if not root.is_dir():
        raise RecordError(f"The images folder {root} does not exist.")
    records, problems = [], []
    with open(jsonl, encoding="utf-8") as f:
        for n, text in enumerate(f, start=1):
            if not text.strip():
                continue
            rec, problem = _parse(text, n, root, open_images, keys)
            if problem:
                problems.append(f"line {n}: {problem}")
            else:
                records.append(rec)
    if problems:
        more = f"\n  ... and {len(problems) - MAX_REPORTED} more" if len(problems) > MAX_REPORTED else ""
        raise RecordError(f"{len(problems)} bad record(s) in {jsonl}:\n  " + "\n  ".join(problems[:MAX_REPORTED])
                          + more)
    if not records:
        raise RecordError(f"{jsonl} holds no records.")
    return records


def _parse(text: str, n: int, root: Path, open_images: bool,
           keys: tuple[str, ...] = FIELDS) -> tuple[tuple | None, str | None]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        return None, f"not valid JSON ({err.msg} at column {err.colno})"
    if not isinstance(obj, dict):
        return None, f"expected a JSON object with keys {list(keys)}, got {type(obj).__name__}"
    missing = [k for k in keys if k not in obj]
    if missing:
        return None, f"missing key(s) {missing}; every record needs {list(keys)}"
    for k in keys:
        if not isinstance(obj[k], str) or not obj[k].strip():
            return None, f"{k!r} must be a non-empty string, got {obj[k]!r}"
    rel = Path(obj["image"])
    if rel.is_absolute() or ".." in rel.parts:
        return None, f"image path {obj['image']!r} must be relative to the images folder, without '..'"
    path = root / rel
    if not path.is_file():
        return None, f"image {obj['image']!r} not found in {root}"
    if open_images:
        try:
            with Image.open(path) as im:
                im.verify()
        except (UnidentifiedImageError, OSError, SyntaxError) as err:
            return None, f"image {obj['image']!r} could not be read as an image ({err})"
    return (obj, path.resolve(), n), None


class RecordDataset(torch.utils.data.Dataset):
    def __init__(self, records: list[Record]):
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> tuple[Image.Image, str, str]:
        r = self.records[i]
        with Image.open(r.image) as im:
            return im.convert("RGB"), r.question, r.answer


class Collator:
    """[(image, question, answer)] -> (input_ids [B, T], attention_mask [B, T], labels [B, T]
    (-100 off the answer), image inputs dict), right-padded, via the target's own `prepare`."""

    def __init__(self, target, max_answer_tokens: int = 256):
        self.target, self.max_answer_tokens = target, max_answer_tokens
        tok = target.tokenizer
        self.eos = tok.eos_token_id if tok.eos_token_id in target.eos_token_ids else min(target.eos_token_ids)
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else self.eos

    def answer_ids(self, prompt_ids: torch.Tensor, answer: str) -> list[int]:
        """Answer tokens + EOS; a leading space when the prompt does not end in whitespace
        ("ASSISTANT:" -> " Red.", Qwen's "assistant\\n" -> "Red.")."""
        tok = self.target.tokenizer
        sep = "" if tok.decode(prompt_ids[-1:]).endswith((" ", "\n")) else " "
        ids = tok(sep + answer, add_special_tokens=False)["input_ids"][: self.max_answer_tokens]
        return ids + [self.eos]

    def __call__(self, examples) -> tuple:
        prompts = [self.target.prepare(img, q) for img, q, _ in examples]
        rows = [(p.input_ids[0].tolist(), self.answer_ids(p.input_ids[0], a))
                for p, (_, _, a) in zip(prompts, examples)]
        width = max(len(p) + len(a) for p, a in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (p, a) in enumerate(rows):
            ids[i, : len(p) + len(a)] = torch.tensor(p + a)
            labels[i, len(p): len(p) + len(a)] = torch.tensor(a)
            att[i, : len(p) + len(a)] = 1
        return ids, att, labels, self.target.batch_model_inputs(prompts, ids)


@torch.no_grad()
def distill(target, records: list[Record], out: Path, max_new_tokens: int = 256, progress=None) -> int:
    """Write `records` to `out` with each answer replaced by the target's greedy output; returns the
    count. Image paths are written relative to `out`'s folder."""
    out.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(out, "w", encoding="utf-8") as f:
        for r in records:
            with Image.open(r.image) as im:
                p = target.prepare(im.convert("RGB"), r.question)
            inputs = {k: v.to(target.device) for k, v in p.model_inputs.items()}
            gen = target.model.generate(input_ids=p.input_ids.to(target.device), **inputs, do_sample=False,
                                        max_new_tokens=max_new_tokens)
            answer = target.tokenizer.decode(gen[0, p.input_ids.shape[1]:], skip_special_tokens=True).strip()
            if answer:
                rel = Path(_relative(r.image, out.parent.resolve()))
                f.write(json.dumps({"image": rel.as_posix(), "question": r.question, "answer": answer}) + "\n")
                written += 1
            if progress is not None:
                progress.update(1)
    return written


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError as err:
        raise RecordError(f"{path} is outside {root}; write the distilled file next to (or above) the "
                          "images folder so image paths stay relative.") from err


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train records", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=Path, required=True, help="JSONL of image/question/answer records")
    p.add_argument("--images-dir", type=Path, help="folder the image paths are relative to (default: the JSONL's)")
    p.add_argument("--target", help="with --distill-out: target folder or Hub id whose greedy answers to write")
    p.add_argument("--distill-out", type=Path, help="write the records with the target's own answers here")
    p.add_argument("--max-new-tokens", type=int, default=256)
    args = p.parse_args(argv)
    records = load_records(args.records, args.images_dir)
    print(f"{len(records)} valid records in {args.records}")
    if args.distill_out is None:
        return
    if not args.target:
        p.error("--distill-out needs --target")
    from tqdm import tqdm

    from fovea.backbones import load_backbone

    target = load_backbone(args.target)
    with tqdm(total=len(records), desc="distil", dynamic_ncols=True) as bar:
        n = distill(target, records, args.distill_out, args.max_new_tokens, bar)
    print(f"wrote {n} records to {args.distill_out}")


if __name__ == "__main__":
    main()
