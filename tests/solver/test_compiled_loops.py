"""The warm-up of the compiled loops (``solver.kernel_sums.compile_loops``, which every worker
runs at start) covers what a job calls: after it, the default request's fit compiles nothing
(the API's warm-up of the prediction loops: tests/service/test_serving_model.py)."""

from __future__ import annotations

from tests.fixtures.compiled_loops import run_fresh

_SCRIPT = """
import warnings
import numpy as np, scipy.sparse as sp
from solver import ODMClassifier, SODMClassifier, kernel_sums

kernel_sums.compile_loops()
before = signatures()
rng = np.random.default_rng(0)
X = rng.random((800, 4))
y = np.where(np.sin(6.0 * X[:, 0]) + X[:, 1] > 0.8, 1, -1)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    auto = SODMClassifier(lam="auto", gamma="auto", theta="auto", random_state=0).fit(X, y)
    for Xi in (X, sp.csr_matrix(X)):
        SODMClassifier(kernel="linear", lam="auto", random_state=0).fit(Xi, y)
        ODMClassifier(kernel="linear", random_state=0).fit(Xi, y)
    ODMClassifier(kernel="poly", degree=2, random_state=0).fit(X[:300], y[:300])
faces = sum(len(f) for row in auto.fit_info_["auto"]["cv_table"] for f in row["faces"])
print(json.dumps({"new": new_since(before), "loops": len(signatures()), "faces": faces}))
"""


def test_a_default_fit_compiles_nothing_after_the_warm_up() -> None:
    got = run_fresh(_SCRIPT)
    # the auto search factored faces, so the Newton steps' loops ran too
    assert got["faces"] > 0 and got["loops"] >= 20
    assert got["new"] == {}
