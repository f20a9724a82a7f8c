"""Optimal margin Distribution Machines: exact ODM and scalable SODM (Wang et al., IJCAI-23).

Public entry points: ``ODMClassifier`` / ``SODMClassifier`` (scikit-learn estimators),
``solver.model_io`` (portable model files), ``solver.margins`` (margin statistics) and
``solver.exceptions.FitCancelled``.
"""

from solver.estimators import ODMClassifier, SODMClassifier
from solver.exceptions import FitCancelled

__all__ = ["ODMClassifier", "SODMClassifier", "FitCancelled"]
