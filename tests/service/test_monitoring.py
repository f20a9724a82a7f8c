"""Margin monitoring (issue 37): the margins ``y_hat * f(x)`` served by ``/predict`` are
counted per model and window and compared with the model's held-out distribution. Rows from
the held-out distribution stay below the PSI threshold, shifted rows cross it; two API
processes' margins add up in one window; the Prometheus gauges show it per model."""

from __future__ import annotations

import time

import numpy as np
import pytest

from app.services.inference import monitoring
from app.services.inference.monitoring import Summary, compare, ks, psi
from solver import ODMClassifier
from solver.margins import served_margins
from tests.service.jobs_helpers import libsvm_bytes, load_libsvm
from tests.service.model_rows import register_model

SHIFT = 0.3  # the drifted rows: every feature moved by this share of its training range


@pytest.fixture(scope="module")
def svmguide(datasets_dir):
    """The svmguide1 training file and its test file cut in two disjoint halves: one for
    the held-out reference, one as live traffic from the same distribution."""
    X, y = load_libsvm(datasets_dir, "svmguide1")
    Xt, _ = load_libsvm(datasets_dir, "svmguide1.t", n_features=X.shape[1])
    order = np.random.default_rng(7).permutation(len(Xt))
    return X, y, Xt[order[:2000]], Xt[order[2000:]]


@pytest.fixture(scope="module")
def fitted(svmguide):
    X, y, _, _ = svmguide
    return ODMClassifier(kernel="rbf", gamma=1.0, lam=100.0, theta=0.3).fit(X, y)


def shifted(X_train: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows with every feature moved by ``SHIFT`` of its range in the training data
    (the model scales each feature to that range)."""
    return rows + SHIFT * (X_train.max(axis=0) - X_train.min(axis=0))


# ------------------------------------------------------------------------------ units
def test_served_margins_are_those_of_the_predicted_labels() -> None:
    assert served_margins(np.array([0.5, -2.0, 0.0])).tolist() == [0.5, 2.0, 0.0]
    assert served_margins(np.array([[1.5], [-0.25]])).tolist() == [1.5, 0.25]
    F = np.array([[0.9, -0.2, -1.1], [-0.3, -0.8, 0.1]])
    # the predicted class's value as it is, the others negated (y_hat_k = -1)
    assert served_margins(F).tolist() == [0.9, 0.2, 1.1, 0.3, 0.8, 0.1]


def test_summaries_add_up_and_the_scores_see_a_shift() -> None:
    rng = np.random.default_rng(1)
    ref = rng.normal(1.0, 0.3, 5000)
    same = rng.normal(1.0, 0.3, 5000)
    moved = rng.normal(1.4, 0.3, 5000)
    r = Summary.of(ref, 0.3)
    halves = Summary.of(same[:2000], 0.3)
    halves.add(Summary.of(same[2000:], 0.3))
    whole = Summary.of(same, 0.3)
    assert (halves.n, halves.inside) == (whole.n, whole.inside)
    np.testing.assert_array_equal(halves.counts, whole.counts)
    assert halves.mean == pytest.approx(same.mean()) and halves.variance == pytest.approx(
        same.var())
    assert whole.inside_share == pytest.approx(np.mean(np.abs(same - 1.0) <= 0.3))
    assert psi(whole.counts, r.counts) < 0.02 and ks(whole.counts, r.counts) < 0.05
    m = Summary.of(moved, 0.3)
    assert psi(m.counts, r.counts) > 0.5 and ks(m.counts, r.counts) > 0.4
    kw = {"threshold": 0.2, "min_margins": 100}
    assert compare(whole, r, **kw)["drift"] is False
    assert compare(m, r, **kw)["drift"] is True
    assert compare(Summary.of(moved[:50], 0.3), r, **kw)["drift"] is None  # too few
    assert compare(m, None, **kw)["psi"] is None
    # margins beyond the grid land in its end bins
    edge = Summary.of(np.array([-100.0, 100.0, 1.0]), 0.3)
    assert edge.counts[0] == 1 and edge.counts[-1] == 1 and edge.counts.sum() == 3
    assert Summary.from_json(edge.to_json()).counts.tolist() == edge.counts.tolist()


# ----------------------------------------------------------------------- in-process API
def _serve(api, model_id: str, rows: np.ndarray, batch: int = 100) -> None:
    for s in range(0, len(rows), batch):
        r = api.post("/predict", json={"model_id": model_id,
                                       "instances": rows[s:s + batch].tolist()})
        assert r.status_code == 200, r.text


def _dataset(api, datasets_dir) -> str:
    r = api.post("/datasets", files={"file": ("svmguide1.libsvm",
                                              libsvm_bytes(datasets_dir, "svmguide1"))})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_shifted_rows_cross_the_threshold_and_unshifted_stay_below(
        api, tenant, svmguide, fitted, datasets_dir) -> None:
    X, _, ref_rows, live_rows = svmguide
    ds = _dataset(api, datasets_dir)
    steady = register_model(tenant[0], ds, fitted, "watched", X_held_out=ref_rows)
    drifting = register_model(tenant[0], ds, fitted, "watched", X_held_out=ref_rows)
    _serve(api, steady, live_rows)
    _serve(api, drifting, shifted(X, live_rows))
    monitoring.recorder().flush()
    calm = api.get(f"/models/{steady}/monitoring").json()
    moved = api.get(f"/models/{drifting}/monitoring").json()
    n = len(live_rows)
    for rep in (calm, moved):
        assert rep["live"]["n"] == n and sum(w["n"] for w in rep["windows"]) == n
        assert rep["reference"]["n"] == len(ref_rows)
        assert rep["reference"]["source"] == "held-out"
        assert rep["band"] == {"theta": 0.3, "lower": 0.7, "upper": 1.3}
        assert len(rep["live"]["counts"]) == len(rep["grid"]["edges"]) + 1
    threshold = calm["psi_threshold"]
    assert calm["live"]["psi"] < threshold / 2 and calm["live"]["drift"] is False
    assert moved["live"]["psi"] > threshold and moved["live"]["drift"] is True
    assert moved["live"]["ks"] > calm["live"]["ks"]
    # the served margins are the model's own: mean and band share as computed here
    m = served_margins(fitted.decision_function(live_rows))
    assert calm["live"]["mean"] == pytest.approx(m.mean(), rel=1e-9)
    assert calm["live"]["variance"] == pytest.approx(m.var(), rel=1e-6)
    assert calm["live"]["inside"] == pytest.approx(np.mean((m >= 0.7) & (m <= 1.3)))
    ref = served_margins(fitted.decision_function(ref_rows))
    assert calm["reference"]["mean"] == pytest.approx(ref.mean(), rel=1e-9)
    for w in moved["windows"]:
        if w["n"] >= moved["min_margins"]:
            assert w["drift"] is True


def test_a_model_without_reference_gets_one_from_its_dataset(api, tenant, fitted,
                                                             datasets_dir) -> None:
    ds = _dataset(api, datasets_dir)
    bare = register_model(tenant[0], ds, fitted, "watched-old")  # as before monitoring
    rep = api.get(f"/models/{bare}/monitoring").json()
    assert rep["live"]["n"] == 0 and rep["windows"] == [] and rep["live"]["drift"] is None
    assert rep["reference"]["source"] == "dataset-sample"
    assert rep["reference"]["n"] == 3089  # every row of the dataset (under the sample size)
    again = api.get(f"/models/{bare}/monitoring").json()
    assert again["reference"] == rep["reference"]  # stored, not recomputed differently
    assert api.get("/models/no-such-model/monitoring").status_code == 404
    assert api.get(f"/models/{bare}/monitoring", params={"windows": 0}).status_code == 422


# ------------------------------------------------------------------------ two processes
def test_every_api_process_counts_and_the_gauges_show_it(
        start_api, tenant, svmguide, fitted, datasets_dir, stack_env, api) -> None:
    import httpx

    X, _, ref_rows, live_rows = svmguide
    ds = _dataset(api, datasets_dir)
    steady = register_model(tenant[0], ds, fitted, "watched-2p", X_held_out=ref_rows)
    drifting = register_model(tenant[0], ds, fitted, "watched-2p", X_held_out=ref_rows)
    servers = [start_api(SODM_MONITOR_FLUSH_SECONDS="0.2") for _ in range(2)]
    clients = [httpx.Client(base_url=s.url, timeout=60,
                            headers={"Authorization": f"Bearer {tenant[1]}"}) for s in servers]
    try:
        half = len(live_rows) // 2
        for c, part in zip(clients, (live_rows[:half], live_rows[half:]), strict=True):
            _serve(c, steady, part)
            _serve(c, drifting, shifted(X, part))
        deadline = time.monotonic() + 60
        while True:
            reps = [clients[0].get(f"/models/{m}/monitoring").json() for m in (steady, drifting)]
            if all(r["live"]["n"] == len(live_rows) for r in reps):
                break
            assert time.monotonic() < deadline, [r["live"]["n"] for r in reps]
            time.sleep(0.2)
        calm, moved = reps
        assert calm["live"]["drift"] is False and moved["live"]["drift"] is True
        token = stack_env["SODM_METRICS_TOKEN"]
        text = clients[1].get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
        gauges = {}
        for line in text.splitlines():
            if line.startswith("sodm_model_margin_psi{") or line.startswith(
                    "sodm_model_margin_drift{") or line.startswith("sodm_model_margins{"):
                name, value = line.rsplit(" ", 1)
                gauges[name] = float(value)
        def gauge(metric: str, model_id: str) -> float:
            return next(v for k, v in gauges.items()
                        if k.startswith(metric + "{") and f'model_id="{model_id}"' in k)
        assert gauge("sodm_model_margin_psi", drifting) > moved["psi_threshold"]
        assert gauge("sodm_model_margin_psi", steady) < calm["psi_threshold"]
        assert gauge("sodm_model_margin_drift", drifting) == 1.0
        assert gauge("sodm_model_margin_drift", steady) == 0.0
        assert gauge("sodm_model_margins", steady) > 0
    finally:
        for c in clients:
            c.close()
