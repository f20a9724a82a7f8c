"""Reproducible stratified partitions: SplitMix64 keys, the dealing rule, level merging."""

from __future__ import annotations

import numpy as np

from solver.sodm.partition import (
    deal_partitions,
    key_threshold,
    level_ids,
    local_seed,
    partition_members,
    row_keys,
    splitmix64,
    stratified_partitions,
)

MASK = (1 << 64) - 1


def _ref_splitmix64(seed: int, i: int) -> int:
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def test_splitmix64_matches_reference_stream() -> None:
    # the first output of SplitMix64 seeded with 0 is the published 0xE220A8397B1DCDAF
    assert int(splitmix64(0, [0])[0]) == 0xE220A8397B1DCDAF
    for seed in (0, 1, 42, 2**63 + 5, -3):
        keys = row_keys(seed, 50)
        assert keys.dtype == np.uint64
        assert [int(k) for k in keys] == [_ref_splitmix64(seed & MASK, i) for i in range(50)]


def _brute_force_deal(strata: np.ndarray, keys: np.ndarray, K: int) -> np.ndarray:
    part = np.empty(len(strata), dtype=np.int64)
    offset = 0
    for s in sorted(set(strata.tolist())):
        rows = [i for i in range(len(strata)) if strata[i] == s]
        rows.sort(key=lambda i: (int(keys[i]), i))
        for rank, i in enumerate(rows):
            part[i] = (rank + offset) % K
        offset = (offset + len(rows)) % K
    return part


def test_dealing_rule_balance_and_proportions() -> None:
    rng = np.random.default_rng(3)
    strata = rng.integers(0, 7, size=503)
    keys = row_keys(11, 503)
    for K in (1, 2, 4, 8, 13):
        part = deal_partitions(strata, keys, K)
        np.testing.assert_array_equal(part, _brute_force_deal(strata, keys, K))
        sizes = np.bincount(part, minlength=K)
        assert sizes.max() - sizes.min() <= 1
        for s in range(7):
            per = np.bincount(part[strata == s], minlength=K)
            n_s = int((strata == s).sum())
            assert per.min() == n_s // K and per.max() == -(-n_s // K)


def test_dealing_rule_with_stratum_ids_beyond_16_bits() -> None:
    strata = np.random.default_rng(4).choice([0, 3, 40_000, 70_000], size=301)
    keys = row_keys(5, 301)
    np.testing.assert_array_equal(deal_partitions(strata, keys, 4),
                                  _brute_force_deal(strata, keys, 4))


def test_key_ties_broken_by_row_index() -> None:
    strata = np.zeros(6, dtype=np.int64)
    keys = np.array([5, 5, 1, 5, 1, 0], dtype=np.uint64)
    # order: row5(0), row2(1), row4(1), row0(5), row1(5), row3(5)
    np.testing.assert_array_equal(deal_partitions(strata, keys, 2), [1, 0, 1, 1, 0, 0])


def test_stratified_partitions_reproducible_and_seed_dependent() -> None:
    strata = np.repeat(np.arange(5), 40)
    a = stratified_partitions(strata, 8, seed=1)
    np.testing.assert_array_equal(a, stratified_partitions(strata, 8, seed=1))
    assert not np.array_equal(a, stratified_partitions(strata, 8, seed=2))


def test_level_merging_is_union_of_consecutive_partitions() -> None:
    finest = stratified_partitions(np.arange(200) % 3, 27, seed=0)  # p = 3, L = 3
    fine = partition_members(finest, 27)
    for level in (2, 1, 0):
        ids = level_ids(finest, 3, 3, level)
        groups = partition_members(ids, 3 ** level)
        child = partition_members(level_ids(finest, 3, 3, level + 1), 3 ** (level + 1))
        for k, g in enumerate(groups):
            assert np.all(np.diff(g) > 0)  # ordered by row index
            union = np.sort(np.concatenate(child[k * 3:k * 3 + 3]))
            np.testing.assert_array_equal(g, union)
    assert sum(g.size for g in fine) == 200


def test_local_seed_and_threshold() -> None:
    s = local_seed(7, 2, 3)
    assert s == local_seed(7, 2, 3) and 0 <= s < 2**31
    expected = int(np.random.SeedSequence([7, 2, 3]).generate_state(1)[0] & 0x7FFFFFFF)
    assert s == expected
    assert len({local_seed(7, 2, k) for k in range(8)}) == 8
    frac = np.mean(row_keys(5, 20000) < key_threshold(0.25))
    assert abs(frac - 0.25) < 0.02
