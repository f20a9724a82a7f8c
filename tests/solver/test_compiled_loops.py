"""The warm-up of the compiled loops (``solver.kernel_sums.compile_loops``, which every worker
runs at start) covers what a job calls: after it, the default request's fit compiles nothing
(the API's warm-up of the prediction loops: tests/service/test_serving_model.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# run in a fresh interpreter: in the test process earlier tests have called the loops already
_SCRIPT = """
import json, sys, warnings
import numpy as np, scipy.sparse as sp
from numba.core.registry import CPUDispatcher
from solver import ODMClassifier, SODMClassifier, kernel_sums

kernel_sums.compile_loops()


def signatures():
    return {f"{name}.{attr}": len(obj.signatures) for name, mod in list(sys.modules.items())
            if name.startswith("solver") and mod is not None
            for attr, obj in vars(mod).items() if isinstance(obj, CPUDispatcher)}


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
after = signatures()
faces = sum(len(f) for row in auto.fit_info_["auto"]["cv_table"] for f in row["faces"])
print(json.dumps({"new": {k: n - before.get(k, 0) for k, n in after.items()
                          if n != before.get(k, 0)},
                  "loops": len(after), "faces": faces}))
"""


def test_a_default_fit_compiles_nothing_after_the_warm_up() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         check=True, cwd=root, timeout=600).stdout.strip().splitlines()[-1]
    got = json.loads(out)
    # the auto search factored faces, so the Newton steps' loops ran too
    assert got["faces"] > 0 and got["loops"] >= 20
    assert got["new"] == {}

