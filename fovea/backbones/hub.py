"""Resolve a model reference (a local folder or a Hugging Face Hub id) to a local folder.

A folder is used as is. A Hub id is looked up in the local Hub cache first and downloaded only
when `huggingface_hub` is installed and a Hub is reachable; otherwise the error says plainly that
the weights cannot be downloaded on this machine and how to bring them over. Knows nothing about
model classes.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class BackboneError(OSError):
    """A model reference that cannot be loaded; the message says what to do instead. An OSError,
    as transformers raises for checkpoints it cannot load, so callers catch both alike."""


def looks_like_hub_id(ref: str) -> bool:
    """`owner/name` whose first component is not an existing local folder (so `runs/x` is a path)."""
    text = str(ref)
    return bool(HUB_ID.match(text)) and not Path(text.split("/")[0]).exists()


def resolve_pretrained(ref: str | os.PathLike, what: str, allow_patterns: list[str] | None = None,
                       offline: bool | None = None) -> Path:
    """Local folder holding `ref`. `what` names the thing in messages ("target", "drafter");
    `offline=True` never touches the network (None: huggingface_hub's HF_HUB_OFFLINE setting)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise BackboneError(f"{path} is not a {what} folder: it has no config.json.")
        return path
    if path.exists():
        raise BackboneError(f"{path} is a file; the {what} must be a folder with config.json and weights.")
    if not looks_like_hub_id(str(ref)):
        raise BackboneError(f"No {what} folder at {path}. Pass a folder with config.json and weights "
                            "(or a Hugging Face Hub id such as owner/name on a machine with Hub access).")
    return _from_hub(str(ref), what, allow_patterns, offline)


def _from_hub(repo_id: str, what: str, allow_patterns, offline: bool | None) -> Path:
    try:
        import huggingface_hub
        from huggingface_hub import constants, errors
    except ImportError as err:
        raise BackboneError(f"{repo_id!r} is not a local folder and huggingface_hub is not installed, so the "
                            f"{what} weights cannot be downloaded here. Download the folder elsewhere and pass its "
                            "path.") from err
    offline = constants.HF_HUB_OFFLINE if offline is None else offline
    failures = (OSError, ValueError, errors.EntryNotFoundError) + _http_errors()
    try:                                  # the local Hub cache first: no network needed
        return Path(huggingface_hub.snapshot_download(repo_id, local_files_only=True,
                                                      allow_patterns=allow_patterns))
    except failures:
        if offline:
            raise BackboneError(_cannot_download(repo_id, what, "Hub access is switched off (offline mode)"))
    try:
        return Path(huggingface_hub.snapshot_download(repo_id, allow_patterns=allow_patterns))
    except failures as err:
        raise BackboneError(_cannot_download(repo_id, what, f"{type(err).__name__}: {err}")) from err


def _http_errors() -> tuple:
    try:
        import httpx
    except ImportError:
        return ()
    return (httpx.HTTPError,)


def _cannot_download(repo_id: str, what: str, reason: str) -> str:
    return (f"The {what} {repo_id!r} is not a local folder and is not in the local Hugging Face cache, and "
            f"its weights cannot be downloaded on this machine ({reason}). On a machine with Hub access run "
            f"`hf download {repo_id} --local-dir <folder>`, copy the folder here and pass its path.")
