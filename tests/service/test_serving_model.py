"""The serving evaluator (``app.services.inference.evaluator.ServingModel``) against the
estimator it serves: RBF models of a few features sum kernel values made from the points,
wider ones go through inner products, and both give the library's decision values; after the
API process's warm-up (``solver.kernel_sums.compile_serving_loops``) a prediction compiles
nothing."""

from __future__ import annotations

import numpy as np
import pytest

from app.services.inference.evaluator import ServingModel
from solver import ODMClassifier
from solver.kernel_sums import DIRECT_RBF_MAX_FEATURES
from tests.fixtures.compiled_loops import run_fresh


@pytest.mark.parametrize("d", [3, DIRECT_RBF_MAX_FEATURES + 1])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_served_decision_values_are_the_estimators(d: int, n_classes: int) -> None:
    rng = np.random.default_rng(d + n_classes)
    X = rng.normal(size=(240, d))
    y = np.argmax(X[:, :n_classes] + 0.3 * rng.normal(size=(240, n_classes)), axis=1) \
        if n_classes > 2 else np.where(X[:, 0] + X[:, -1] > 0, 1, -1)
    est = ODMClassifier(kernel="rbf", lam=10.0, gamma=0.5).fit(X, y)
    served = ServingModel(est)
    assert (served.svT is not None) == (d <= DIRECT_RBF_MAX_FEATURES)
    rows = rng.normal(size=(57, d))
    F = served.decision(rows)
    want = np.asarray(est.decision_function(rows)).reshape(57, -1)
    assert F.shape == want.shape == (57, 1 if n_classes == 2 else n_classes)
    np.testing.assert_allclose(F, want, rtol=1e-12, atol=1e-12)
    assert served.labels(F) == est.predict(rows).tolist()


_WARM_UP = """
import numpy as np
from app.services.inference.evaluator import ServingModel
from solver import ODMClassifier, kernel_sums

rng = np.random.default_rng(0)
X = rng.random((200, 30))
y = np.where(X[:, 0] + X[:, 1] > 1.0, 1, -1)
models = [ODMClassifier(kernel="rbf", random_state=0).fit(X[:, :3], y),  # few features
          ODMClassifier(kernel="rbf", random_state=0).fit(X, y),
          ODMClassifier(kernel="poly", degree=2, random_state=0).fit(X, y)]
kernel_sums.compile_serving_loops()
before = signatures()
for est in models:
    ServingModel(est).decision(X[:5, :est.n_features_in_])
print(json.dumps(new_since(before)))
"""


def test_a_prediction_compiles_nothing_after_the_serving_warm_up() -> None:
    # the models are fitted before the warm-up, but fitting never calls the serving loops
    assert run_fresh(_WARM_UP) == {}
