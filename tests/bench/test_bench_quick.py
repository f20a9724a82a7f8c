"""The benchmark command's quick mode (CI): every default method row is measured on one core
(and, with an ``n_jobs`` knob, on two; the Spark row on svmguide1, on one core only), with CPU
seconds of the process tree, model size and prediction cost, and the report renders.

Runs ``python -m bench.run --quick`` (svmguide1 and phishing subsampled to 1,500 training rows,
a two-point grid per family, a tiny scaling study) into a temporary directory; about 1-1.5
minutes on 2 cores. No timing assertion: the speed numbers live in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.methods import METHODS

REPO = Path(__file__).resolve().parents[2]


def test_quick_benchmark_rows_and_report(tmp_path: Path) -> None:
    out, doc = tmp_path / "quick.json", tmp_path / "bench.md"
    proc = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--out", str(out),
                           "--doc", str(doc)], cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert set(results["datasets"]) == {"svmguide1", "phishing"}
    default = {m for m, meth in METHODS.items() if meth.default}
    for name, ds in results["datasets"].items():
        expected = {m for m in default if not METHODS[m].spark or name == "svmguide1"}
        assert set(ds["methods"]) == expected, name
        for m, row in ds["methods"].items():
            assert set(row["configs"]) == ({"1", "2"} if METHODS[m].parallel else {"1"}), \
                (name, m)
            cores = {"1"} if METHODS[m].spark else set(row["configs"])
            if METHODS[m].spark and METHODS[m].parallel:  # one JVM less, and it says so
                assert row["configs"]["2"]["summary"]["status"] == "skipped", (name, m)
            for c in cores:
                s = row["configs"][c]["summary"]
                assert s["status"] == "ok", (name, m, c, row["configs"][c]["runs"])
                assert 0.5 < s["accuracy"] <= 1.0, (name, m, s["accuracy"])
                assert s["fit_s"] > 0 and s["fit_cpu_s"] > 0, (name, m, c)
                assert s["peak_rss_mb"] >= s["base_rss_mb"] > 0, (name, m, c)
                assert s["model_bytes"] > 0 and s["predict_s_per_1k"] > 0, (name, m, c)
        # the same model on one and two cores and on Spark: the same test predictions
        configs = [("sodm-rbf", "1"), ("sodm-rbf", "2"), ("sodm-rbf-spark", "1")]
        hashes = {ds["methods"][m]["configs"][c]["summary"]["predictions_sha1"]
                  for m, c in configs if m in ds["methods"]}
        assert len(hashes) == 1, (name, hashes)
        assert len({t["status"] for t in ds["tuning"].values()}) == 1
        for fam, t in ds["tuning"].items():
            assert t["status"] == "ok" and t["best"] in [r["params"] for r in t["table"]], fam
            assert len(t["table"]) == results["config"]["grid_points_target"], fam
    sc = results["scaling"]
    bad = [(m, p) for m, rec in sc["size"].items() for p in rec["points"]
           if p["status"] != "ok"]
    assert not bad, bad
    text = doc.read_text()
    for needle in ("## Targets (issue 19)", "### Table 2 (RBF kernel)", "#### phishing",
                   "SODM (RBF)", "LinearSVC (LIBLINEAR)", "Nystroem(4,000) + LinearSVC",
                   "RFF(2,000) + LinearSVC", "SODM (RBF, Spark local)", "CPU s, 1 core",
                   "model KB", "## Cost model", "log-log slope"):
        assert needle in text, needle
    pngs = {p.name for p in (tmp_path / "img").glob("*.png")}
    assert {"bench-datasets.png", "bench-scaling.png"} <= pngs
    assert all((tmp_path / "img" / p).stat().st_size > 1000 for p in pngs)
