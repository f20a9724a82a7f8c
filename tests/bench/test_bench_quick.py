"""The benchmark command's quick mode (CI): every method row (the Spark ones on local[2]
included) is measured and the report renders.

Runs ``python -m bench.run --quick`` (svmguide1 and phishing subsampled to 1,500 training rows,
a two-point grid per family, a tiny scaling study) into a temporary directory; about 1.5-2
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
    for name, ds in results["datasets"].items():
        assert set(ds["methods"]) == set(METHODS), name
        for m, row in ds["methods"].items():
            s = row["summary"]
            assert s["status"] == "ok", (name, m, row["runs"])
            assert 0.5 < s["accuracy"] <= 1.0, (name, m, s["accuracy"])
            assert s["fit_s"] > 0 and s["peak_rss_mb"] >= s["base_rss_mb"] > 0, (name, m)
        for fam, t in ds["tuning"].items():
            assert t["status"] == "ok" and t["best"] in [r["params"] for r in t["table"]], fam
    sc = results["scaling"]
    assert all(p["status"] == "ok" for rec in sc["size"].values() for p in rec["points"])
    text = doc.read_text()
    for needle in ("## Targets of issues 2 and 6", "### Table 2 (RBF kernel)", "#### phishing",
                   "SODM (RBF)", "LinearSVC (LIBLINEAR)", "SODM (RBF, Spark local)",
                   "Spark MLlib LinearSVC", "log-log slope"):
        assert needle in text, needle
    pngs = {p.name for p in (tmp_path / "img").glob("*.png")}
    assert {"bench-datasets.png", "bench-scaling.png"} <= pngs
    assert all((tmp_path / "img" / p).stat().st_size > 1000 for p in pngs)
