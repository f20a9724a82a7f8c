"""The "auto" hyperparameter search (``search``): ``lam`` / ``gamma`` / ``theta``
chosen by k-fold CV on subsamples of the training rows within a CPU budget.
"""
