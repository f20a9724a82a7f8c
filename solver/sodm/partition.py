"""Reproducible stratified partitions for SODM (Algorithm 1 step 2, Algorithm 2 steps 2-3).

Every random choice is a pure function of ``(seed, row index)`` so a distributed engine (the
Spark backend) recomputes exactly the same partitions without collecting data to the driver:

* **Row identity** is the row index ``i = 0..M-1`` in input order (the dataset's ``row_id``).
* **Key**: ``key_i = splitmix64(seed, i)``, the ``(i+1)``-th output of a SplitMix64 stream
  whose state starts at ``seed mod 2**64`` (:func:`splitmix64`).
* **Dealing** (:func:`deal_partitions`): order rows by ``(stratum id, key, row index)``; a
  row's partition is ``(rank_within_stratum + offset_s) mod K`` with
  ``offset_s = (sum of the sizes of strata with a smaller id) mod K``.  This equals
  ``global position in that order mod K``, so every stratum is split into K pieces whose sizes
  differ by at most one (stratum proportions preserved) and the partition sizes differ by at
  most one.  A distributed engine needs only the per-stratum counts (S numbers) and each
  row's rank of its key inside its stratum.
* **Hierarchy**: partitions are numbered ``0..p**L - 1`` at the finest level ``L``; partition
  ``k`` at level ``l-1`` is the union of partitions ``k*p .. k*p+p-1`` of level ``l``, i.e.
  ``id_l = id_L // p**(L-l)`` (:func:`level_ids`).  Inside a partition rows are ordered by row
  index.
* **Local solver seed** for partition ``k`` at level ``l`` (``l = 0`` is the global problem):
  ``SeedSequence([seed, l, k]).generate_state(1)[0] & 0x7FFFFFFF`` (:func:`local_seed`).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "splitmix64",
    "row_keys",
    "deal_partitions",
    "stratified_partitions",
    "level_ids",
    "partition_members",
    "local_seed",
    "key_threshold",
]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def splitmix64(seed: int, idx) -> np.ndarray:
    """SplitMix64 hash of row indices: ``z = seed + (i+1)*0x9E3779B97F4A7C15 (mod 2**64)``,
    ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
    z ^= z >> 31`` (all arithmetic mod 2**64).  Vectorised over ``idx``; returns uint64."""
    i = np.asarray(idx).astype(np.uint64, copy=False)
    s = np.uint64(int(seed) & _MASK64)
    with np.errstate(over="ignore"):
        z = s + (i + np.uint64(1)) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return z


def row_keys(seed: int, n_rows: int) -> np.ndarray:
    """``splitmix64(seed, i)`` for ``i = 0..n_rows-1``."""
    return splitmix64(seed, np.arange(n_rows, dtype=np.uint64))


def key_threshold(fraction: float) -> np.uint64:
    """uint64 threshold so that ``key < threshold`` keeps about ``fraction`` of the rows."""
    f = min(max(float(fraction), 0.0), 1.0)
    return np.uint64(min(int(f * 2.0**64), _MASK64))


def deal_partitions(strata, keys, n_partitions: int) -> np.ndarray:
    """Partition id per row from stratum ids and keys (the dealing rule of the module docstring).

    ``strata``: int stratum id per row; ``keys``: uint64 per row (``splitmix64(seed, i)``).
    Ties in the key are broken by row index.  Returns int64 ids in ``0..n_partitions-1``.
    """
    strata = np.asarray(strata, dtype=np.int64).ravel()
    keys = np.asarray(keys, dtype=np.uint64).ravel()
    if strata.shape != keys.shape:
        raise ValueError("strata and keys must have the same length")
    K = int(n_partitions)
    if K < 1:
        raise ValueError(f"n_partitions must be >= 1, got {n_partitions!r}")
    m = strata.shape[0]
    order = np.argsort(keys)
    sk = keys[order]
    if m > 1 and np.any(sk[1:] == sk[:-1]):
        order = np.lexsort((np.arange(m), keys, strata))  # ties in the key: by row index
    else:
        # distinct keys (always so for ``row_keys``: splitmix64 is a bijection): one sort by
        # key, then a stable one by stratum (a radix sort on 16-bit ids), several times
        # faster than the three-key lexsort
        st = strata[order]
        if m and st.min() >= 0 and st.max() < 2**15:
            st = st.astype(np.int16)
        order = order[np.argsort(st, kind="stable")]
    part = np.empty(m, dtype=np.int64)
    part[order] = np.arange(m, dtype=np.int64) % K
    return part


def stratified_partitions(strata, n_partitions: int, seed: int) -> np.ndarray:
    """Balanced stratified partitions: :func:`deal_partitions` with ``splitmix64(seed, i)``."""
    strata = np.asarray(strata, dtype=np.int64).ravel()
    return deal_partitions(strata, row_keys(seed, strata.shape[0]), n_partitions)


def level_ids(finest_ids, p: int, levels: int, level: int) -> np.ndarray:
    """Partition ids at ``level`` (``0 <= level <= levels``) from the finest level's ids."""
    if not 0 <= level <= levels:
        raise ValueError(f"level must be in [0, {levels}], got {level}")
    return np.asarray(finest_ids, dtype=np.int64) // (int(p) ** (int(levels) - int(level)))


def partition_members(ids, n_partitions: int) -> list[np.ndarray]:
    """Row indices of each partition ``0..n_partitions-1``, each sorted by row index."""
    ids = np.asarray(ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    bounds = np.searchsorted(ids[order], np.arange(int(n_partitions) + 1))
    return [order[bounds[k]:bounds[k + 1]] for k in range(int(n_partitions))]


def local_seed(seed: int, level: int, k: int) -> int:
    """Seed of the local solver for partition ``k`` at ``level``: from
    ``SeedSequence([seed, level, k])`` (seed taken mod 2**63 to stay non-negative)."""
    ss = np.random.SeedSequence([int(seed) & 0x7FFFFFFFFFFFFFFF, int(level), int(k)])
    return int(ss.generate_state(1)[0] & 0x7FFFFFFF)
