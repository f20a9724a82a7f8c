"""``bench.kernel_values`` times RBF values from the points and through inner products per
feature count; on a small matrix it prints one row per count and leaves the dispatch limit
as it found it. No timing assertion: the numbers live in docs/design-notes.md."""

from __future__ import annotations

import solver.core.kernels as kernels
from bench.kernel_values import main


def test_one_row_per_feature_count_and_the_limit_restored(capsys) -> None:
    assert main(["--rows", "600", "--features", "3", "16"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["3", "16"]
    for r in rows:
        cells = [float(c) for c in r.strip("|").split("|")[1:]]
        assert len(cells) == 4 and all(c > 0 for c in cells)
    assert kernels.DIRECT_RBF_MAX_FEATURES == 12
