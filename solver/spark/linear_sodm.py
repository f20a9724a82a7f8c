"""SODM Algorithm 2 (distributed SVRG, linear ODM) on Spark DataFrames.

Mirrors ``solver.linear.dsvrg.sodm_linear``:

* partitions: landmarks and strata under the linear kernel and the same dealing rule
  (``solver.spark.strata``); each partition's rows are packed once into one row (row ids,
  labels and model-space features as arrays, in row-id order) and checkpointed;
* full gradient ``h = (1/M) sum_j (m_j w + X_j' c_j)``: a distributed aggregate (each packed
  partition returns a vector of size d, summed on the driver);
* inner phase: partition ``j = 0..K-1`` in turn, one Spark job each, runs the local compiled
  inner loop (``solver.linear.dsvrg``) over its rows in the order
  ``default_rng(SeedSequence([seed, e, j])).permutation(m_j)``; the iterate travels between
  jobs in the local code's representation ``w = u + s v`` (``v`` of size d and the scalar s),
  so the sequence of updates is the local one;
* step size ``0.5 / L_max`` from the distributed maximum row norm; stop after ``epochs`` or
  when ``||grad|| <= tol ||grad(0)||``; ``should_stop`` is polled between partitions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from solver.spark.data import DataInfo, batch_X, model_space, sql

__all__ = ["LinearRun", "sodm_linear_spark"]


@dataclass
class LinearRun:
    w: np.ndarray
    history: list[dict] = field(default_factory=list)
    stopped: bool = False
    converged: bool = False
    step_size: float = 0.0


def _unpack(pdf_row: pd.Series, d: int, sparse: bool):
    """A packed partition's ``(X, y)`` (its normalized weights are ``pdf_row["sw"]``)."""
    y = np.asarray(pdf_row["y"], dtype=np.float64)
    if sparse:
        X = sp.csr_matrix((np.asarray(pdf_row["data"], dtype=np.float64),
                           np.asarray(pdf_row["indices"], dtype=np.int32),
                           np.asarray(pdf_row["indptr"], dtype=np.int64)), shape=(len(y), d))
    else:
        X = np.asarray(pdf_row["data"], dtype=np.float64).reshape(len(y), d)
    return X, y


def _pack(parts: Any, info: DataInfo, M: int) -> tuple[Any, int]:
    """One row per partition: ``part, row_id[], y[], data[], indices[], indptr[]`` (CSR or
    row-major dense), rows in row-id order, and ``sw[]``: the rows' weights normalized to
    mean 1 over all ``M`` rows (``solver.linear.dsvrg.normalized_weights``; ones unweighted)."""
    scale = None if not info.weight_col else float(M) / float(info.weight_total or M)

    def pack(pdf: pd.DataFrame) -> pd.DataFrame:
        pdf = pdf.sort_values("row_id", kind="stable")
        Z = model_space(batch_X(pdf, info), info)
        if sp.issparse(Z):
            Z = sp.csr_matrix(Z)
            data, indices, indptr = Z.data, Z.indices.astype(np.int64), Z.indptr
        else:
            data = np.ascontiguousarray(Z).ravel()
            indices, indptr = np.zeros(0, np.int64), np.zeros(0, np.int64)
        w = info.weights(pdf)
        sw = np.ones(len(pdf)) if w is None else w * scale
        return pd.DataFrame({"part": [int(pdf["part"].iloc[0])],
                             "row_id": [pdf["row_id"].to_numpy(np.int64)],
                             "y": [pdf["y"].to_numpy(np.float64)], "data": [data],
                             "indices": [indices], "indptr": [indptr], "sw": [sw]})

    schema = ("part long, row_id array<long>, y array<double>, data array<double>, "
              "indices array<long>, indptr array<long>, sw array<double>")
    packed = parts.groupBy("part").applyInPandas(pack, schema).localCheckpoint(eager=True)
    d = info.n_features + (1 if info.fit_intercept else 0)
    return packed, d


def _gradient(packed: Any, w: np.ndarray, params: Any, d: int, sparse: bool, M: int
              ) -> tuple[np.ndarray, float]:
    """Full gradient ``w + (1/M) sum_j X_j' c_j`` (the partitions' sums added in partition
    order, then the local ``full_gradient`` arithmetic) and the primal loss sum (one job)."""

    def part_grad(batches):
        from solver.core.formulation import margin_loss
        from solver.linear.dsvrg import instance_coefficients

        for pdf in batches:
            for _, row in pdf.iterrows():
                X, y = _unpack(row, d, sparse)
                sw = np.asarray(row["sw"], dtype=np.float64)
                g = y * np.asarray(X @ w).ravel()
                c = instance_coefficients(g, y, params, sw)
                h = np.asarray(X.T @ c).ravel()
                loss = margin_loss(g, params, sw)
                yield pd.DataFrame({"part": [int(row["part"])], "h": [h], "loss": [loss]})

    rows = packed.mapInPandas(part_grad, "part long, h array<double>, loss double").collect()
    rows.sort(key=lambda r: r["part"])  # the local code sums partitions in id order
    total = np.zeros(d)
    for r in rows:
        total += np.asarray(r["h"], dtype=np.float64)
    loss = sum(float(r["loss"]) for r in rows)
    return w + total / M, loss


def _partitions(base: Any, info: DataInfo, M: int, K: int, S: int, seed: int,
                landmark_candidates: int | None, candidates: pd.DataFrame | None
                ) -> tuple[Any, Any]:
    """Rows tagged with their partition ``part`` (landmarks, strata and the dealing rule
    when ``K > 1``; all in partition 0 otherwise) and the strata frame to release, if any."""
    from solver.core.kernels import Kernel
    from solver.sodm.hierarchy import DEFAULT_LANDMARK_CANDIDATES
    from solver.spark.strata import assign_partitions_spark, select_landmarks_spark

    F, _ = sql(base)
    if K <= 1:
        return base.withColumn("part", F.lit(0).cast("long")), None
    linear = Kernel("linear")
    cand = DEFAULT_LANDMARK_CANDIDATES if landmark_candidates is None \
        else int(landmark_candidates)
    _, Zl = select_landmarks_spark(base, info, linear, min(S, M), M, seed, cand, candidates)
    parts, strata = assign_partitions_spark(base, info, linear, Zl, K, seed)
    return parts.drop("stratum"), strata


def _step_size(packed: Any, params: Any, d: int, sparse: bool, step_size: float | None
               ) -> float:
    """``step_size``, or ``0.5 / L_max`` from the row with the largest norm (one job);
    outside ``(0, 1)`` is a ``ValueError``."""
    from solver.core.formulation import lipschitz_constant

    if step_size is None:
        def max_row(batches):
            for pdf in batches:
                for _, row in pdf.iterrows():
                    X, _ = _unpack(row, d, sparse)
                    sq = np.asarray(X.multiply(X).sum(axis=1)).ravel() if sparse \
                        else np.einsum("ij,ij->i", X, X)
                    sq = sq * np.asarray(row["sw"], dtype=np.float64)
                    if sq.size:
                        i = int(np.argmax(sq))
                        xi = X[i].toarray().ravel() if sparse else X[i]
                        yield pd.DataFrame({"sq": [float(sq[i])], "x": [xi],
                                            "sw": [float(row["sw"][i])]})

        top = max(packed.mapInPandas(max_row, "sq double, x array<double>, sw double")
                  .collect(), key=lambda r: r["sq"])
        # lipschitz_constant of the row with the largest (weighted) norm = the local L_max
        eta = 0.5 / lipschitz_constant(np.asarray([top["x"]], dtype=np.float64), params,
                                       np.asarray([top["sw"]], dtype=np.float64))
    else:
        eta = float(step_size)
    if not 0 < eta < 1:
        raise ValueError(f"step_size must be in (0, 1), got {step_size!r}")
    return eta


@dataclass
class _Inner:
    """What every inner-phase job needs besides the iterate: the packed partitions, the
    layout, the seed and the step's constants."""

    packed: Any
    params: Any
    d: int
    sparse: bool
    seed: int
    eta: float

    def job(self, e: int, j: int, u: np.ndarray, w_tilde: np.ndarray, v: np.ndarray,
            s: float) -> tuple[np.ndarray, float]:
        """Partition ``j``'s pass of epoch ``e`` (one Spark job): the new ``(v, s)``."""
        from solver.linear.dsvrg import inner_csr, inner_dense

        F, _ = sql(self.packed)
        d, sparse, seed, params, eta = self.d, self.sparse, self.seed, self.params, self.eta
        slam = params.lam / (1.0 - params.theta) ** 2
        th, ups = float(params.theta), float(params.upsilon)

        def inner(batches, v=v, s=s, e=e, j=j, u=u, w_tilde=w_tilde):
            from solver.linear.dsvrg import instance_coefficients

            for pdf in batches:
                for _, row in pdf.iterrows():
                    X, y = _unpack(row, d, sparse)
                    sw = np.asarray(row["sw"], dtype=np.float64)
                    order = np.random.default_rng(
                        np.random.SeedSequence([seed, e, j])).permutation(y.size)
                    xu = np.asarray(X @ u, dtype=np.float64).ravel()
                    cw = instance_coefficients(y * np.asarray(X @ w_tilde).ravel(), y, params,
                                               sw)
                    vv = v.copy()
                    o = np.ascontiguousarray(order, dtype=np.int64)
                    if sparse:
                        s2 = inner_csr(o, X.indptr, X.indices, X.data, y, sw, xu,
                                       cw, vv, s, eta, slam, th, ups)
                    else:
                        s2 = inner_dense(o, np.ascontiguousarray(X), y, sw, xu, cw,
                                         vv, s, eta, slam, th, ups)
                    yield pd.DataFrame({"v": [vv], "s": [float(s2)]})

        out = self.packed.filter(F.col("part") == F.lit(j)) \
            .mapInPandas(inner, "v array<double>, s double").collect()
        if out:
            return np.asarray(out[0]["v"], dtype=np.float64), float(out[0]["s"])
        return v, s

    def epoch(self, e: int, K: int, w: np.ndarray, h: np.ndarray,
              should_stop: Callable[[], bool] | None) -> tuple[np.ndarray, bool]:
        """The inner phase of epoch ``e``: partitions ``0..K-1`` in turn from ``w`` with the
        full gradient ``h``; the new ``w`` and whether ``should_stop`` interrupted it."""
        u = w - h
        v = h.astype(np.float64, copy=True)
        s = 1.0
        stopped = False
        for j in range(K):
            if should_stop is not None and should_stop():
                stopped = True
                break
            v, s = self.job(e, j, u, w, v, s)
        return u + s * v, stopped


def sodm_linear_spark(base: Any, info: DataInfo, params: Any, *, n_rows: int,
                      n_partitions: int | None, n_strata: int | None, epochs: int | None,
                      step_size: float | None, seed: int, tol: float = 1e-3,
                      landmark_candidates: int | None = None,
                      candidates: pd.DataFrame | None = None,
                      progress: Callable[[float, str, dict], None] | None = None,
                      should_stop: Callable[[], bool] | None = None) -> LinearRun:
    """Run Algorithm 2 over ``base`` (``row_id``, ``y``, feature columns); returns ``w``."""
    from solver.linear.dsvrg import DEFAULT_EPOCHS, default_partitions
    from solver.sodm.hierarchy import DEFAULT_N_STRATA

    M = int(n_rows)
    K = default_partitions(M) if n_partitions is None else int(n_partitions)
    S = DEFAULT_N_STRATA if n_strata is None else int(n_strata)
    E = DEFAULT_EPOCHS if epochs is None else int(epochs)
    K = min(K, M)
    sparse = info.layout == "sparse"
    parts, strata = _partitions(base, info, M, K, S, seed, landmark_candidates, candidates)
    packed, d = _pack(parts, info, M)
    if strata is not None:
        strata.unpersist()
    eta = _step_size(packed, params, d, sparse, step_size)
    run = LinearRun(w=np.zeros(d), step_size=eta)
    run.w = _epochs(run, _Inner(packed, params, d, sparse, seed, eta), M, K, E, tol,
                    progress, should_stop)
    packed.unpersist()
    return run


def _epochs(run: LinearRun, inner: _Inner, M: int, K: int, E: int, tol: float,
            progress: Callable[[float, str, dict], None] | None,
            should_stop: Callable[[], bool] | None) -> np.ndarray:
    """The outer loop from ``w = 0``: an inner phase and a full gradient per epoch, a
    history record and a progress call each; fills ``run`` and returns the last ``w``."""
    from solver.core.formulation import objective_from_loss

    packed, params, d, sparse = inner.packed, inner.params, inner.d, inner.sparse
    w = np.zeros(d)
    t_start = time.perf_counter()
    h, _ = _gradient(packed, w, params, d, sparse, M)
    g0 = max(float(np.linalg.norm(h)), 1e-300)  # w0 = 0: h is grad(0)
    for e in range(1, E + 1):
        if should_stop is not None and should_stop():
            run.stopped = True
            break
        t0 = time.perf_counter()
        w, run.stopped = inner.epoch(e, K, w, h, should_stop)
        if run.stopped:
            break
        h, loss = _gradient(packed, w, params, d, sparse, M)
        gn = float(np.linalg.norm(h))
        obj = objective_from_loss(w, loss, params, M)
        rec = {"epoch": e, "objective": obj, "grad_norm": gn,
               "seconds": time.perf_counter() - t0, "elapsed": time.perf_counter() - t_start,
               "backend": "spark"}
        run.history.append(rec)
        run.w = w
        if progress is not None:
            progress(e / E, f"epoch {e}/{E}: objective {obj:.6g}, |grad| {gn:.3g}", rec)
        if not np.isfinite(gn):
            raise FloatingPointError(f"DSVRG diverged at epoch {e} (step size {inner.eta:g})")
        if gn <= tol * g0:
            run.converged = True
            break
    return w
