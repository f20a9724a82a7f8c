"""bench.cost_target: issue 34's item 1 read off bench.auto_params records, and the host table
in docs/auto-params.md that it renders."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from bench.cost_target import cost_rows, dataset_table, hosts_table, main, read_records

REPO = Path(__file__).resolve().parents[2]


def _result(name: str, n: int, auto: float, svc_cv: float, svc_fit: float, gap: float,
            seed: int = 0) -> dict:
    return {"dataset": name, "seed": seed, "n_train": n, "gap_points": gap,
            "auto_odm": {"total_cpu_s": auto}, "svc": {"search_cpu_s": svc_cv,
                                                        "final_cpu_s": svc_fit}}


RECORD = {"results": [
    _result("small", 3_000, 9.0, 1.0, 1.0, +0.1),  # 4.5x, but under 5,000 rows
    _result("mid", 8_000, 9.0, 6.0, 4.0, -0.2),  # 0.9x of 10: met
    _result("mid", 8_000, 30.0, 6.0, 4.0, -0.2, seed=1),  # another seed: not read
    _result("mid_gap", 8_000, 5.0, 6.0, 4.0, -0.31),  # cheap but 0.31 points behind
    _result("large", 150_000, 6.0, 5.0, 5.0, +0.0),  # 0.6x from 100,000 rows: missed
    _result("large_ok", 150_000, 5.0, 5.0, 5.0, +0.0),  # 0.5x: met
]}


def test_targets_and_verdicts_follow_the_issue():
    rows = {r.dataset: r for r in cost_rows(RECORD)}
    assert list(rows) == ["small", "mid", "mid_gap", "large", "large_ok"]  # first seed only
    assert rows["small"].target is None and rows["small"].met is None
    assert rows["mid"].target == 1.0 and rows["mid"].ratio == pytest.approx(0.9)
    assert rows["mid"].met is True
    assert rows["mid_gap"].met is False  # the gap fails it, not the ratio
    assert rows["large"].target == 0.5 and rows["large"].met is False
    assert rows["large_ok"].met is True
    free_svc = cost_rows({"results": [_result("mid", 8_000, 1.0, 0.0, 0.0, 0.0)]})[0]
    assert free_svc.ratio == float("inf") and free_svc.met is False  # no division by zero


def test_dataset_table_counts_the_covered_datasets():
    text = dataset_table(cost_rows(RECORD))
    assert "| mid | 8,000 | 1.0x | 9.0 | 10.0 | 0.90x | -0.20 | met |" in text
    assert "| large | 150,000 | 0.5x | 6.0 | 10.0 | 0.60x | +0.00 | **missed** |" in text
    assert "| small | 3,000 | - |" in text
    assert text.endswith("item 1 met on 2 of the 4 datasets with at least 5,000 training rows")
    small = dataset_table(cost_rows({"results": RECORD["results"][:1]}))
    assert small.endswith("item 1 covers none of these datasets (under 5,000 training rows)")


def test_hosts_table_sets_records_side_by_side():
    other = {"machine": {"cpu": {"vendor": "GenuineIntel", "family": 6, "model": 167,
                                 "extensions": ["AVX2", "AVX-512", "AMX"]}},
             "results": [_result("mid", 8_000, 11.0, 6.0, 4.0, +0.1)]}
    lines = hosts_table([("first", RECORD), ("second", other)]).splitlines()
    assert lines[0] == "| run | CPU | mid | mid_gap | large | large_ok | item 1 |"
    assert lines[2] == "| first | - | 0.90x | **0.50x** | **0.60x** | 0.50x | 2/4 |"
    assert lines[3] == "| second | Intel 6/167, AVX-512 / AMX | **1.10x** | - | - | - | 0/1 |"


def test_command_prints_one_records_table(tmp_path: Path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(RECORD))
    assert main([f"this run={path}"]) == 0
    assert capsys.readouterr().out.strip() == dataset_table(cost_rows(RECORD))


def test_auto_params_doc_table_is_the_commands_render(monkeypatch):
    """The host table docs/auto-params.md leads with is what the command in the comment above
    it prints from the records it names (edit the records or the command, not the table)."""
    doc = (REPO / "docs" / "auto-params.md").read_text()
    m = re.search(r"<!-- (python -m bench\.cost_target .+?) -->\n\n(\|.+?)\n\n", doc, re.S)
    assert m, "docs/auto-params.md has no table rendered by bench.cost_target"
    monkeypatch.chdir(REPO)
    records = read_records(shlex.split(m.group(1))[3:])
    assert len(records) >= 2
    assert m.group(2) == hosts_table(records)
