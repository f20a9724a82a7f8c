"""Exceptions raised by the solver library (kept in one place so the service can catch them)."""

from __future__ import annotations


class InvalidParameterError(ValueError):
    """A hyperparameter with a bad value; ``name`` is the parameter (``"lam"``, ``"p"``...).

    A ``ValueError`` so callers that catch those keep working; the service reads ``name``
    to point its 422 at the field instead of parsing the message.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class FitCancelled(Exception):
    """Raised by ``fit`` when the caller's ``should_stop()`` callback asked to stop.

    The estimator is left unfitted; ``history`` holds the per-level / per-epoch records
    that were produced before the stop, so a caller can still report progress.
    """

    def __init__(self, message: str = "fit cancelled by should_stop()", history=None) -> None:
        super().__init__(message)
        self.history: list[dict] = list(history or [])


def convergence_warning() -> type[Warning]:
    """scikit-learn's ``ConvergenceWarning``, imported only when a solver warns: importing
    scikit-learn is slow, and the solver's worker processes otherwise skip it."""
    from sklearn.exceptions import ConvergenceWarning

    return ConvergenceWarning
