"""``bench.numba_speedup`` runs the same fits with and without numba's JIT, each mode in its
own process, and the two give the same model (the kernels are the same Python either way).
No timing assertion: the numbers live in docs/design-notes.md ("Why numba")."""

from __future__ import annotations

from bench.numba_speedup import run_mode


def test_both_modes_fit_the_same_models() -> None:
    jit = run_mode(True, "heart_scale", [120])
    python = run_mode(False, "heart_scale", [120])
    assert [(r["kernel"], r["rows"]) for r in jit] == [("rbf", 120), ("linear", 120)]
    assert [(r["kernel"], r["rows"]) for r in python] == [(r["kernel"], r["rows"]) for r in jit]
    for j, p in zip(jit, python, strict=True):
        assert j["jit"] and not p["jit"]  # the child without JIT really ran without it
        assert j["cpu_s"] >= 0 and p["cpu_s"] >= 0
        assert 0.5 < j["accuracy"] <= 1 and p["accuracy"] == j["accuracy"]
