"""Whole kernel matrices kept across the solves of a hyperparameter search.

The "auto" search (:mod:`solver.auto.search`) scores many (lam, theta) candidates on the same
training rows of a fold with the same kernel: every one of those solves would compute the
same ``m x m`` matrix. A :class:`KernelMemo` keeps the matrices the solves computed, least
recently used first out, within a byte budget; a solve that finds its key reads the kept
matrix (the same array :func:`solver.core.kernels.kernel_matrix` returned, so the same values
bit for bit, and the same solution). The solver never writes into a full kernel matrix.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

__all__ = ["KernelMemo", "MemoSlot"]


class KernelMemo:
    """Kernel matrices by key, at most ``max_bytes`` of them (least recently used dropped);
    ``hits`` and ``computed`` count the requests answered from memory and computed."""

    def __init__(self, max_bytes: float) -> None:
        self.max_bytes = float(max_bytes)
        self._kept: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self.hits = 0
        self.computed = 0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._kept.values())

    def slot(self, key: Hashable) -> MemoSlot:
        """The place of one solve's matrix: ``key`` names its rows and kernel."""
        return MemoSlot(self, key)

    def matrix(self, key: Hashable, shape: tuple[int, int], dtype: np.dtype,
               compute: Callable[[], np.ndarray]) -> np.ndarray:
        """The kept matrix of ``key`` when its shape and dtype match, else ``compute()``
        (kept when it fits the budget, evicting the least recently used)."""
        full = (key, shape, np.dtype(dtype).str)
        got = self._kept.get(full)
        if got is not None:
            self._kept.move_to_end(full)
            self.hits += 1
            return got
        out = compute()
        self.computed += 1
        if out.nbytes <= self.max_bytes:
            while self._kept and self.nbytes + out.nbytes > self.max_bytes:
                self._kept.popitem(last=False)
            self._kept[full] = out
        return out

    def clear(self) -> None:
        self._kept.clear()


@dataclass(frozen=True)
class MemoSlot:
    """A :class:`KernelMemo` and the key of one solve's rows and kernel (what a solve gets)."""

    memo: KernelMemo
    key: Hashable

    def matrix(self, shape: tuple[int, int], dtype: np.dtype,
               compute: Callable[[], np.ndarray]) -> np.ndarray:
        return self.memo.matrix(self.key, shape, dtype, compute)
