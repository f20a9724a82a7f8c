"""``docs/benchmarks.md`` is what ``bench.report`` renders from ``docs/benchmarks.json`` and
``bench/notes.md``: a hand edit of the doc alone would be lost at the next render, so the
analysis lives in the notes and the doc must match the render."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report import render

ROOT = Path(__file__).resolve().parents[2]


def test_benchmarks_doc_is_the_render_of_its_json_and_notes(tmp_path: Path):
    results = json.loads((ROOT / "docs" / "benchmarks.json").read_text())
    rendered = render(results, tmp_path, "img")
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    assert rendered == doc, "docs/benchmarks.md differs from bench.report's render: edit " \
                            "bench/notes.md and run python -m bench.report docs/benchmarks.json"
    assert any(tmp_path.glob("*.png"))  # the plots the doc links were drawn
