"""Stop adding level-1 partitions once another one no longer pays (the held-out gain rule).

Without a final global solve, SODM's model is the sum of its level-1 partitions' local ODMs
(``solver.estimators.average_local_duals``). On rows drawn like the training rows that
sum's accuracy is often flat after a few partitions, and the rest then cost CPU seconds and
support vectors for nothing measurable; but on a test file drawn unlike the training rows
the partitions the rule drops still helped, so it is off unless asked for
(docs/auto-params.md, "The final fit's partitions, one by one", has the measurements).

The rule reads rows the fit never trained on: the last partition's. Partitions ``0, 1, ...``
are solved in order, and after each (from the second on) the sum of the local decisions
so far is scored on the last partition's rows against the same sum without the newest: when
the newest raised that accuracy by less than ``min_gain``, the fit keeps the partitions
solved so far and stops. The last partition is solved only when no step stopped the fit.
Only the solved duals decide, so the same rows and seed keep the same partitions on any
machine and with any number of worker processes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["HeldOutCurve"]


class HeldOutCurve:
    """The running sum of local decisions on the held-out rows and each step's gain.

    ``y`` the held-out rows' labels in {-1, +1}, ``weights`` their weights (None: equal),
    ``min_gain`` the smallest gain in accuracy (a fraction, not points) that earns another
    partition.
    """

    def __init__(self, y: np.ndarray, min_gain: float,
                 weights: np.ndarray | None = None) -> None:
        self.y = np.asarray(y, dtype=np.float64)
        self.w = (np.ones(self.y.size) if weights is None
                  else np.asarray(weights, dtype=np.float64))
        self.min_gain = float(min_gain)
        self.total = np.zeros(self.y.size)
        self.accuracies: list[float] = []

    @property
    def gains(self) -> list[float]:
        """Each step's gain over the step before (from the second step on)."""
        return [b - a for a, b in zip(self.accuracies, self.accuracies[1:], strict=False)]

    def add(self, decision: np.ndarray) -> bool:
        """Add one partition's decision on the held-out rows; True when it gained less than
        ``min_gain`` (the fit stops, keeping it)."""
        self.total += np.asarray(decision, dtype=np.float64)
        right = np.where(self.total > 0, 1.0, -1.0) == self.y
        self.accuracies.append(float(self.w @ right) / float(self.w.sum()))
        acc = self.accuracies
        return len(acc) >= 2 and acc[-1] - acc[-2] < self.min_gain
