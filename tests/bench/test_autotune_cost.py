"""``bench.autotune_cost``'s face accounting: ``factored_faces`` reads the faces a real
kernel fit factored, its work model recovers seconds made of rows and face work where the
rows-only one cannot, and its calibration searches record what each candidate cost."""

from __future__ import annotations

import numpy as np
import pytest

import bench.autotune_cost as autotune_cost
from bench.autotune_cost import face_models, search_entries, search_model
from solver import ODMClassifier
from solver.auto.search import factored_faces


def test_factored_faces_reads_the_fits_newton_record() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=400) > 0, 1, -1)
    # large lam: coordinate descent alone is slow, the active-set Newton step factors faces
    est = ODMClassifier(kernel="rbf", gamma=0.2, lam=1e6, theta=0.5, random_state=0).fit(X, y)
    faces = factored_faces(est)
    assert faces and all(0 < s <= 400 for s in faces), faces
    assert factored_faces(ODMClassifier(kernel="linear", lam=1e3, random_state=0).fit(X, y)) == []


def test_face_models_recover_face_work() -> None:
    # seconds = 1e-3 + 1e-10 m^2 (d + 100) + 4e-11 sum(s^3)/3: rows alone cannot fit them
    rows = []
    for m in (1000, 3000, 6000):
        for lam, faces in ((0.0, []), (3.0, [m // 2]), (6.0, [m, m // 2, m // 3])):
            work = sum(s ** 3 for s in faces) / 3
            rows.append({"rows": m, "d": 20.0, "width_offset": 100.0, "log_lam": lam,
                         "epochs": 5, "faces": faces,
                         "cpu_s": 1e-3 + 1e-10 * m * m * 120.0 + 4e-11 * work})
    out = face_models(rows)
    exact = out["with_faces"]
    assert np.allclose(exact["coefficients"], [1e-3, 1e-10, 4e-11], rtol=1e-6)
    assert exact["mean_abs_log_ratio_3000"] < 1e-6
    assert out["rows_only"]["mean_abs_log_ratio_3000"] > 0.1
    _, _, high = out["rows_only"]["ratio_3000_by_log_lam"]["6"]
    assert high < 1.0  # rows alone under-predict the large-lam fits


def test_search_model_recovers_the_constants() -> None:
    # a candidate of k folds costs k c0 + c1 k m_f^2 (d + 100) + c3 sum of its faces' work
    entries = []
    for rows in (600, 1800, 5400):
        m = rows * 2 / 3
        for faces in ([], [[int(m // 2)]] * 3, [[int(m), int(m // 3)]] * 3):
            work = sum(s ** 3 for f in faces for s in f) / 3
            entries.append({"dataset": "x", "d": 10.0, "folds": 3, "rows": rows,
                            "faces": faces or [[], [], []],
                            "cpu_s": 3 * 5e-4 + 1e-10 * 3 * m * m * 110.0 + 5e-11 * work})
    out = search_model(entries, 100.0)
    assert np.allclose(out["coefficients"], [5e-4, 1e-10, 5e-11], rtol=1e-6)
    assert out["ratio_total"] == pytest.approx(1.0)


def test_search_entries_record_each_candidates_faces_and_seconds(monkeypatch) -> None:
    monkeypatch.setattr(autotune_cost, "DATASETS", ("svmguide1",))
    entries = search_entries(budget=0.3)
    assert len(entries) >= 35  # the first rung runs whole
    assert all(len(e["faces"]) == e["folds"] == 3 and e["cpu_s"] > 0 for e in entries)
    assert any(any(f) for e in entries for f in e["faces"])  # some fits factored faces
    assert {e["rows"] for e in entries} <= {1029, 3089}
