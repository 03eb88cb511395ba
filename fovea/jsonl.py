"""JSON-lines files (one JSON object a line), plain or gzipped: the per-question rows and answers
committed beside results, and training logs. A name ending in .gz is gzip; its header carries no
time, so the same records give the same bytes. Knows nothing about what the records hold.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path


def write_jsonl_gz(path: Path, records: list[dict]) -> None:
    """The records as gzipped JSON lines at `path` (about a tenth of their plain size)."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write("".join(json.dumps(r) + "\n" for r in records).encode())


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file, gzipped where its name ends in .gz."""
    path = Path(path)
    data = path.read_bytes()
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]
