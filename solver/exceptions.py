"""Exceptions raised by the solver library (kept in one place so the service can catch them)."""

from __future__ import annotations


class FitCancelled(Exception):
    """Raised by ``fit`` when the caller's ``should_stop()`` callback asked to stop.

    The estimator is left unfitted; ``history`` holds the per-level / per-epoch records
    that were produced before the stop, so a caller can still report progress.
    """

    def __init__(self, message: str = "fit cancelled by should_stop()", history=None) -> None:
        super().__init__(message)
        self.history: list[dict] = list(history or [])
