"""scikit-learn estimators for the Optimal margin Distribution Machine.

``ODMClassifier`` solves the ODM dual exactly (dual coordinate descent: ``dcd_linear`` for the
linear kernel, ``dcd_kernel`` otherwise). ``SODMClassifier`` trains with the scalable SODM
algorithms of Wang et al. (IJCAI-23): the hierarchical stratified-partition scheme
(Algorithm 1, ``sodm_kernel``) for kernels, and distributed SVRG (Algorithm 2,
``sodm_linear``) for the linear kernel by default.
``CascadeODMClassifier``, ``DiPODMClassifier``, ``DCODMClassifier`` and ``SVRGODMClassifier``
are the SODM paper's benchmark baselines with the same API and model files.

As scikit-learn keeps ``svm/_base.py`` and ``svm/_classes.py`` apart: ``_base.py`` holds the
shared fit / predict machinery (``ODMBase``, ``build_fitted``, parameter and weight checks),
``_classes.py`` the six estimators; import them from here.

Model, in the SODM paper's convention (``docs/architecture.md``)::

    min_w  1/2 ||w||^2 + lam/(2M) * sum_i (xi_i^2 + upsilon * eps_i^2) / (1 - theta)^2
    s.t.   1 - theta - xi_i <= y_i w.phi(x_i) <= 1 + theta + eps_i

Choices made here (documented because the paper leaves them open):

* Labels: any two labels (numbers, strings, bools; two distinct non-integer floats too,
  while more than two non-integer floats are rejected as a regression target);
  ``classes_`` is sorted, ``classes_[0]`` (the smaller) maps to -1.
  More than two classes: one-vs-rest, one binary ODM per class, ``predict`` takes the arg max.
* ``scale=True`` (default): every feature is min-max scaled to [0, 1] on the training data
  inside the model (the paper's preprocessing); constant features map to 0.
* ``fit_intercept=True`` appends a constant feature 1 (as the authors' code does). The paper's
  model has no bias; ``fit_intercept=False`` gives exactly the paper's model. For the RBF
  kernel a constant feature changes nothing (distances are unchanged).
* ``gamma="scale"`` (default) means ``1 / (n_features * Var(X_scaled))`` computed on the scaled
  training features (like scikit-learn's SVC), 1.0 when that variance is 0; a positive number
  is used as is. Kernels: rbf ``exp(-gamma ||x-z||^2)``, poly ``(gamma x.z + coef0)^degree``.
* ``lam`` default 1e4: the paper's lam weights the *mean* squared deviation, so it plays the
  role of ``C * M`` of an SVM, and small values underfit.  Chosen on validation rows held out
  of the training splits of six datasets (``bench/sodm_defaults.py --part lam``; the numbers
  are in ``docs/design-notes.md``).
  ``upsilon=0.5``, ``theta=0.2`` are ``ODMParams``' defaults (libodm uses mu=0.8, theta=0.2;
  the authors' SODM driver 0.5 / 0.5).
* Fitted model: kernel models keep only support vectors (``zeta_i + beta_i > 0``; the union
  over one-vs-rest problems) in the scaled feature space, ``dual_coef_[k, j] = y_j (zeta_j -
  beta_j)`` per problem, and predict with kernel blocks; linear models keep ``w_`` (one row per
  problem, the last entry is the intercept weight when ``fit_intercept``) and predict with it.
  ``n_support_[k]`` counts the instances outside the band ``[1-theta, 1+theta]`` of problem k.
  With ``max_support_vectors`` a kernel model keeps at most that many of its support vectors
  (``support_`` lists them), the decision function projected onto them.
* ``lam``, ``gamma``, ``theta`` may each be ``"auto"``: ``fit`` first chooses them by k-fold
  CV with the exact solver on stratified subsamples of its rows (``solver.auto.search``:
  successive halving over a coarse grid, then a local refinement, within a CPU budget of
  ``max(10 s, 3 x the final fit)``), then fits on all rows with the chosen values. The
  parameters stay "auto"; ``lam_``, ``gamma_``, ``theta_`` and ``fit_info_["params"]`` hold
  the values used, ``fit_info_["auto"]`` the search (CV table, CPU seconds, budget).
* ``probability=True`` adds ``predict_proba``: Platt scaling fitted on out-of-fold decision
  values (``solver.calibration``), recorded in ``fit_info_["calibration"]``.
* ``random_state``: an int seed is passed to the solver unchanged for a binary problem (so
  other backends reproduce it from the same seed); one-vs-rest problem k uses the seed
  ``SeedSequence([seed, k]).generate_state(1)[0] & 0x7FFFFFFF``. ``None`` draws a fresh seed.
* SODM without ``final_global_solve`` ends with the local solutions of the last solved level;
  the stored duals are their size-weighted average (``average_local_duals``): the paper's
  predictions, with decision values on the ODM margin scale.
* ``should_stop()`` returning True makes ``fit`` raise ``solver.exceptions.FitCancelled``.
* Weights: ``fit(X, y, sample_weight)`` and ``class_weight`` (``"balanced"``:
  ``n_samples / (n_classes * bincount(y))`` as scikit-learn; or ``{label: weight}``, other
  labels 1) multiply each row's loss (``solver.core.formulation``: its dual diagonal term is divided
  by the weight, and ``M`` is the weights' sum), the two combined by product. An integer
  weight k gives the model of the row repeated k times; rows of weight 0 are dropped before
  anything is fitted (scaling, gamma, the solve), as scikit-learn does; negative or
  non-finite weights, or all zero, are a ``ValueError``. One-vs-rest problems use the same
  row weights. Weights that are all equal change nothing and are ignored.
"""

from solver.estimators._base import (
    KERNELS,
    ODMBase,
    build_fitted,
    check_kernel_range,
    class_weight_table,
    class_weights,
    is_int,
    is_real,
    require,
    row_weights,
)
from solver.estimators._classes import (
    BASELINE_ESTIMATORS,
    CascadeODMClassifier,
    DCODMClassifier,
    DiPODMClassifier,
    ODMClassifier,
    SODMClassifier,
    SVRGODMClassifier,
    average_local_duals,
)

__all__ = ["ODMBase", "ODMClassifier", "SODMClassifier", "CascadeODMClassifier",
           "DiPODMClassifier", "DCODMClassifier", "SVRGODMClassifier", "BASELINE_ESTIMATORS",
           "build_fitted", "average_local_duals", "class_weights", "class_weight_table",
           "row_weights", "KERNELS", "check_kernel_range", "is_int", "is_real", "require"]
