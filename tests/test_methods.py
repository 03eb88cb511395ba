"""The method table and the drafter-context table: every pair entry names real methods, the twin is
FOVEA's drafter context with the correction off, and the pair names are written in one library file."""
import re
from pathlib import Path

import pytest

from fovea.methods import AUTOREGRESSIVE, CONTEXTS, FOVEA, FULL, METHODS, ROLES

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", list(CONTEXTS))
def test_each_context_names_its_pair_its_best_and_its_settings_from_the_method_table(name):
    c = CONTEXTS[name]
    fovea, twin = METHODS[c.fovea], METHODS[c.twin]
    assert (fovea.drafter, twin.drafter) == (c.fovea, c.twin)      # drafter names = their plain methods' names
    assert twin.overrides == {"correction": {"enabled": False}} and fovea.overrides == {}
    assert all(METHODS[m].drafter == c.fovea for m in (c.best, *c.settings))
    assert c.methods == (METHODS[c.best], twin)
    assert list(c.drafter_folders) == [c.fovea, c.twin] and list(c.drafter_folders.values()) == list(c.folders)


def test_folders_are_distinct_and_the_roles_are_the_full_contexts_methods():
    folders = [f for c in CONTEXTS.values() for f in c.folders]
    assert len(folders) == len(set(folders))
    assert ROLES == (FULL.fovea, FULL.twin, AUTOREGRESSIVE.name) and FOVEA is METHODS[FULL.fovea]


def test_pair_names_are_written_in_fovea_methods_only():
    # every drafter folder and pair method name but the two plain words ("drafter", "fovea"), which
    # name much else (a module, the package)
    names = {n for c in CONTEXTS.values() for n in (*c.folders, c.fovea, c.twin, c.best, *c.settings)}
    names -= {"drafter", "fovea"}
    pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, names))) + r")\b")
    sources = [p for folder in ("fovea", "app") for p in (ROOT / folder).rglob("*.py")] + [ROOT / "app.py"]
    found = {str(p.relative_to(ROOT)): sorted(set(pattern.findall(p.read_text()))) for p in sources
             if p != ROOT / "fovea" / "methods.py"}
    assert {path: got for path, got in found.items() if got} == {}
