"""Benchmark questions in MMSpec's JSONL layout: bad lines are named, and the bench on them groups
its results by category with the acceptance rate per draft position."""
import json

import pytest

from fovea.bench.mmspec import bench_questions, load_questions
from fovea.data import make_sample
from fovea.training.records import RecordError


def _questions(folder, n=3):
    (folder / "img").mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        s = make_sample(50_000 + i)
        s.image.save(folder / "img" / f"{i}.png")
        lines.append({"image": f"img/{i}.png", "question": s.question, "category": ["charts", "scenes"][i % 2],
                      "question_id": i})
    (folder / "q.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return folder / "q.jsonl"


def test_mmspec_questions_load_in_order_and_bad_lines_are_named(tmp_path):
    path = _questions(tmp_path)
    qs = load_questions(path, n=2)
    assert [q.family for q in qs] == ["charts", "scenes"] and qs[0].image.mode == "RGB"
    path.write_text(path.read_text() + json.dumps({"image": "img/0.png", "question": "q?"}) + "\n")
    with pytest.raises(RecordError, match=r"line 4: missing key\(s\) \['category'\]"):
        load_questions(path)
    with pytest.raises(SystemExit, match="--mmspec: No records file"):
        bench_questions(tmp_path / "none.jsonl", 3)


def test_the_bench_on_mmspec_questions_groups_results_by_category(tmp_path):
    from fovea.bench import main

    main(["--tiny-random", "--mmspec", str(_questions(tmp_path)), "--n", "3", "--methods", "fovea",
          "--max-new-tokens", "6", "--no-analyses", "--no-cold-start", "--out", str(tmp_path / "out")])
    table = json.loads((tmp_path / "out" / "by_category.json").read_text())
    assert list(table) == ["charts", "scenes", "all"]
    assert table["all"]["fovea"]["n"] == 3 and table["charts"]["fovea"]["n"] == 2
    assert table["all"]["autoregressive"]["acceptance_by_position"] == []
    rates = table["all"]["fovea"]["acceptance_by_position"]
    assert all(0.0 <= a <= 1.0 for a in rates) and table["all"]["fovea"]["lossless"]
    assert "| charts | fovea |" in (tmp_path / "out" / "by_category.md").read_text()
