"""bench.blas: the record of which BLAS kernels a benchmark ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.blas import ENV_VARS, blas_kernels, describe

REPO = Path(__file__).resolve().parents[2]


def test_blas_kernels_lists_numpy_and_scipy_blas_with_their_kernels() -> None:
    info = blas_kernels()
    assert info["env"] == {v: os.environ.get(v) for v in ENV_VARS}
    assert info["libraries"], "numpy and scipy load at least one BLAS"
    for lib in info["libraries"]:
        assert lib["api"] and lib["version"] and lib["prefix"]
        if lib["api"] == "openblas":
            assert isinstance(lib["architecture"], str) and lib["architecture"]


def test_a_forced_kernel_set_is_what_the_record_says() -> None:
    # Nehalem (SSE4.2, 2008) runs on every x86-64 server CPU in use, so forcing it is safe
    env = {**os.environ, "OPENBLAS_CORETYPE": "Nehalem", "PYTHONPATH": str(REPO)}
    env.pop("OPENBLAS_L2_SIZE", None)
    out = subprocess.run(
        [sys.executable, "-c", "import json; from bench.blas import blas_kernels; "
                               "print(json.dumps(blas_kernels()))"],
        env=env, capture_output=True, text=True, check=True, timeout=120).stdout
    info = json.loads(out)
    assert info["env"] == {"OPENBLAS_CORETYPE": "Nehalem", "OPENBLAS_L2_SIZE": None}
    openblas = [lib for lib in info["libraries"] if lib["api"] == "openblas"]
    assert openblas and all(lib["architecture"] == "Nehalem" for lib in openblas)
    assert "OPENBLAS_CORETYPE=Nehalem" in describe(info)


def test_describe_names_each_library_and_the_environment() -> None:
    info = {"env": {"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None},
            "libraries": [{"api": "openblas", "version": "0.3.31", "architecture": "SkylakeX",
                           "prefix": "libscipy_openblas"}]}
    assert describe(info) == ("BLAS libscipy_openblas openblas 0.3.31: SkylakeX kernels; "
                              "no OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE set")
    info["env"]["OPENBLAS_CORETYPE"] = "Haswell"
    assert describe(info).endswith("; OPENBLAS_CORETYPE=Haswell")


def test_a_bench_run_record_with_its_blas_names_the_kernels_in_the_machine_line(
        tmp_path: Path) -> None:
    from bench.report import render

    path = REPO / "bench" / "records" / "issue34-item3-rbf-4715ded-amd512-native.json"
    results = json.loads(path.read_text())
    machine_line = next(ln for ln in render(results, tmp_path, "img").splitlines()
                        if ln.startswith("- Machine:"))
    assert machine_line.endswith("; " + describe(results["machine"]["blas"]) + ".")
    assert "SkylakeX kernels" in machine_line
    del results["machine"]["blas"]  # records from before bench.blas render as they did
    machine_line = next(ln for ln in render(results, tmp_path, "img").splitlines()
                        if ln.startswith("- Machine:"))
    assert "BLAS" not in machine_line and machine_line.endswith(results["machine"]["numba"] + ".")
