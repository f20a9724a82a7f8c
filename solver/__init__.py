"""Optimal margin Distribution Machines: exact ODM and scalable SODM (Wang et al., IJCAI-23).

Public entry points: ``ODMClassifier`` / ``SODMClassifier`` (scikit-learn estimators),
``solver.io.model_io`` (portable model files), ``solver.margins`` (margin statistics) and
``solver.exceptions.FitCancelled``.

The estimators (and with them scikit-learn, a slow import) load on first use, so the
solver's worker processes, which import only the numeric modules, start fast.
"""

from typing import Any

from solver.exceptions import FitCancelled

__all__ = ["ODMClassifier", "SODMClassifier", "FitCancelled"]


def __getattr__(name: str) -> Any:
    if name in ("ODMClassifier", "SODMClassifier"):
        from solver import estimators

        return getattr(estimators, name)
    raise AttributeError(f"module 'solver' has no attribute {name!r}")
