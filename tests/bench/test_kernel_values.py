"""``bench.kernel_values`` times RBF values from the points and through inner products per
feature count, the latter in the default blocks and in the fixed largest ones; on a small
matrix it prints one row per count and leaves the dispatch limit as it found it. No timing
assertion: the numbers live in docs/design-notes.md."""

from __future__ import annotations

import pytest

import solver.core.kernels as kernels
from bench.kernel_values import main


def test_one_row_per_feature_count_and_the_limit_restored(capsys) -> None:
    assert main(["--rows", "600", "--features", "3", "16"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["3", "16"]
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")[1:]]
        assert int(cells[0].replace(",", "")) == kernels._MIN_BLOCK_ELEMS  # few features
        times = [float(c) for c in cells[1:4] + cells[5:8]]
        assert len(times) == 6 and all(t > 0 for t in times)
        for ratio, (rule, fixed) in ((cells[4], times[1:3]), (cells[8], times[4:6])):
            # the ratio of the unrounded times, against the printed ones (to 2 decimals)
            slack = rule / fixed * (0.005 / rule + 0.005 / fixed) + 0.005
            assert ratio.endswith("x") and float(ratio[:-1]) == pytest.approx(rule / fixed,
                                                                           abs=slack)
    assert kernels.DIRECT_RBF_MAX_FEATURES == 12
