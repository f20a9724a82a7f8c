"""Distributed landmarks, strata and partition dealing (SODM step 1-2) on Spark DataFrames.

Reproduces ``solver.sodm.landmarks`` / ``solver.sodm.partition`` row for row without collecting the
data (at most the landmark candidate sample):

* Landmarks among a bounded candidate sample (the default, ``solver.sodm.hierarchy``'s
  ``landmark_candidates``): the candidates (``splitmix64(seed, row_id)`` below the local
  threshold; every row when there are fewer rows) are collected, a few MB, and the local
  selection runs on them in the driver.  The fit collects them in its statistics pass
  (``solver.spark.data.summarize``), so the landmarks cost no Spark job of their own.
* Landmarks among all rows, unbounded (``max_candidates=None``; pivoted incomplete
  Cholesky, largest residual first, ties to the lowest row index, stop when the residual is
  ``<= 1e-10`` times the largest diagonal): ``S`` passes.
  Pass ``s`` broadcasts the ``s`` pivots chosen so far (their rows, their Cholesky rows and
  residuals), every executor recomputes its rows' factor columns with exactly the local
  recursion ``l_t = (k(z, p_t) - l[:t].lp_t[:t]) / sqrt(r(p_t))``, ``r -= l_t^2`` (one kernel
  column per pivot, like the local code), and reduces its batch to the candidate with the
  largest residual; the driver keeps the best (S small rows per pass).
* Strata: ``solver.sodm.landmarks.assign_strata`` on each Arrow batch against the broadcast
  landmark rows, in one cached pass that carries the data along (no join back) and
  counts the rows per stratum.
* Dealing: ``key = splitmix64(seed, row_id)`` (``solver.sodm.partition``), mapped to a signed
  long that sorts like the unsigned key; ``rank = row_number() over (partition by stratum
  order by key, row_id) - 1``; ``part = (rank + offset[stratum]) mod K`` with offsets from
  the per-stratum counts: the local rule "global position in (stratum, key, row) order mod K".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from solver.spark.data import DataInfo, batch_X, ddl_fields, model_space, sql

__all__ = ["select_landmarks_spark", "assign_partitions_spark", "LANDMARK_TOL"]

LANDMARK_TOL = 1e-10  # solver.sodm.landmarks.select_landmarks default
_SIGN = np.uint64(1 << 63)


def _sorted_model_rows(pdf: pd.DataFrame, info: DataInfo):
    pdf = pdf.sort_values("row_id", kind="stable")
    return pdf, model_space(batch_X(pdf, info), info)


def _dense_rows(Z) -> np.ndarray:
    return Z.toarray() if hasattr(Z, "toarray") else np.asarray(Z)


def _collect_candidates(base: Any, info: DataInfo, n_rows: int, seed: int,
                        max_candidates: int) -> pd.DataFrame:
    """The raw rows (``row_id`` + input columns) whose ``splitmix64(seed, row_id)`` key is
    below the threshold, about ``max_candidates`` of them (a few MB), in row-id order (the
    first row when the sample is empty, as the local rule)."""
    from solver.sodm.landmarks import is_candidate

    cols = ["row_id", *info.input_cols]

    def sample(batches):
        for pdf in batches:
            rid = pdf["row_id"].to_numpy(dtype=np.int64)
            keep = is_candidate(rid.astype(np.uint64), n_rows, seed, max_candidates)
            if keep.any():
                yield pdf[keep]

    rows = base.select(*cols)
    pdf = rows.mapInPandas(sample, ", ".join(ddl_fields(rows))).toPandas()
    if len(pdf) == 0:
        pdf = base.select(*cols).orderBy("row_id").limit(1).toPandas()
    return pdf.sort_values("row_id", kind="stable").reset_index(drop=True)


def landmarks_from_candidates(candidates: pd.DataFrame, info: DataInfo, kernel: Any,
                              n_landmarks: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The local greedy selection (``solver.sodm.landmarks.select_landmarks``) on the candidate
    rows (raw, in row-id order) put in model space: row ids and model-space rows."""
    from solver.sodm.landmarks import select_landmarks

    pdf, Z = _sorted_model_rows(candidates, info)
    rid = pdf["row_id"].to_numpy(dtype=np.int64)
    # sparse rows stay sparse (as the local backend selects them; no dense copy of a wide
    # sample), only the chosen landmark rows are made dense
    idx = select_landmarks(Z, kernel, n_landmarks, seed, tol=LANDMARK_TOL)
    return rid[idx], _dense_rows(Z[idx])


def select_landmarks_spark(base: Any, info: DataInfo, kernel: Any, n_landmarks: int,
                           n_rows: int, seed: int = 0, max_candidates: int | None = None,
                           candidates: pd.DataFrame | None = None
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Row ids (selection order) and model-space rows of up to ``n_landmarks`` landmarks,
    among about ``max_candidates`` sampled rows (seeded by ``seed``; all rows when there are
    fewer), collected to the driver unless ``candidates`` (that sample's raw rows, from
    ``solver.spark.data.summarize``) is given; ``max_candidates=None``: among all rows, one
    distributed pass per landmark."""
    if max_candidates is not None:
        if candidates is None:
            candidates = _collect_candidates(base, info, int(n_rows), int(seed),
                                             int(max_candidates))
        return landmarks_from_candidates(candidates, info, kernel, int(n_landmarks), int(seed))
    return _landmarks_by_passes(base, info, kernel, min(int(n_landmarks), int(n_rows)))


def _landmarks_by_passes(base: Any, info: DataInfo, kernel: Any, S: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Pivoted partial Cholesky over all rows: one distributed pass per landmark picks the
    row with the largest residual (lowest row id on ties) until ``S`` or the residuals
    fall below ``LANDMARK_TOL`` times the largest kernel diagonal."""
    pivots_z: list[np.ndarray] = []
    pivots_l = np.zeros((S, S))
    pivots_r: list[float] = []
    chosen: list[int] = []
    scale = None
    for s in range(S):
        rows = _best_rows(base, info, kernel, S, s, np.vstack(pivots_z) if pivots_z else None,
                          pivots_l.copy(), np.asarray(pivots_r, dtype=np.float64),
                          np.asarray(chosen, dtype=np.int64))
        if not rows:
            break
        best = max(rows, key=lambda r: (r["r"], -r["row_id"]))
        if scale is None:
            scale = max(float(r["dmax"]) for r in rows)
        if not best["r"] > LANDMARK_TOL * max(scale, 1e-300):
            break
        pivots_z.append(np.asarray(best["z"], dtype=np.float64))
        pivots_l[s, :] = np.asarray(best["l"], dtype=np.float64)
        pivots_r.append(float(best["r"]))
        chosen.append(int(best["row_id"]))
        # the new pivot's own factor entry l_s(p_s) = sqrt(r(p_s)) is recomputed by the
        # recursion on the next pass; Lp only needs the entries before the diagonal
    return np.asarray(chosen, dtype=np.int64), (np.vstack(pivots_z) if pivots_z
                                                else np.zeros((0, 0)))


def _best_rows(base: Any, info: DataInfo, kernel: Any, S: int, s: int, Pz: np.ndarray | None,
               Lp: np.ndarray, rp: np.ndarray, taken: np.ndarray) -> list[Any]:
    """Pass ``s`` (one job): per batch, the row not yet ``taken`` with the largest residual
    after the ``s`` pivots ``Pz`` (factor rows ``Lp``, residuals ``rp``), its factor row and
    the batch's largest kernel diagonal."""
    from solver.core.kernels import kernel_diag, kernel_matrix

    def best_of_batch(batches, Pz=Pz, Lp=Lp, rp=rp, taken=taken, s=s):
        for pdf in batches:
            if len(pdf) == 0:
                continue
            pdf, Z = _sorted_model_rows(pdf, info)
            rid = pdf["row_id"].to_numpy(dtype=np.int64)
            r = kernel_diag(kernel, Z).astype(np.float64, copy=True)
            dmax = float(r.max())
            Lf = np.zeros((Z.shape[0], S), dtype=np.float64)
            for t in range(s):
                col = kernel_matrix(kernel, Z, Pz[t:t + 1]).ravel()
                lnew = (col - Lf[:, :t] @ Lp[t, :t]) / np.sqrt(rp[t])
                Lf[:, t] = lnew
                r -= lnew * lnew
            rr = np.where(np.isin(rid, taken), -np.inf, r)
            j = int(np.argmax(rr))  # rows sorted by row_id: first max = lowest id
            yield pd.DataFrame({
                "row_id": [int(rid[j])], "r": [float(rr[j])], "dmax": [dmax],
                "z": [_dense_rows(Z[j:j + 1]).ravel()], "l": [Lf[j].copy()],
            })

    return (base.select("row_id", *info.input_cols)
            .mapInPandas(best_of_batch,
                         "row_id long, r double, dmax double, z array<double>, "
                         "l array<double>")
            .collect())


def assign_partitions_spark(base: Any, info: DataInfo, kernel: Any, landmarks: np.ndarray,
                            n_partitions: int, seed: int) -> tuple[Any, Any]:
    """``base``'s rows with ``stratum`` and ``part`` (finest partition) reproducing the local
    dealing: one pass assigns the strata and counts them per stratum (cached, so the dealing
    reads it instead of assigning again), the dealing is a window over it.  Returns
    ``(rows, cached)``: unpersist ``cached`` once ``rows`` has been materialised."""
    from solver.sodm.landmarks import assign_strata
    from solver.sodm.partition import splitmix64

    F, Window = sql(base)
    K = int(n_partitions)
    Zl = np.asarray(landmarks, dtype=np.float64)

    def strata(batches):
        for pdf in batches:
            if len(pdf) == 0:
                continue
            pdf, Z = _sorted_model_rows(pdf, info)
            rid = pdf["row_id"].to_numpy(dtype=np.int64)
            pdf["stratum"] = assign_strata(Z, Zl, kernel).astype(np.int64)
            pdf["key"] = (splitmix64(seed, rid) ^ _SIGN).view(np.int64)
            yield pdf

    schema = ", ".join(ddl_fields(base) + ["stratum long", "key long"])
    # cached (memory, spilling to disk): the per-stratum counts are the job that assigns
    # the strata and fills the cache; the dealing window then reads the cache
    sk = base.mapInPandas(strata, schema).persist()
    counts = {int(r["stratum"]): int(r["count"])
              for r in sk.groupBy("stratum").count().collect()}
    offsets, acc = [], 0
    for st in range(max(counts) + 1 if counts else 0):
        offsets.append(acc % K)
        acc += counts.get(st, 0)
    w = Window.partitionBy("stratum").orderBy("key", "row_id")
    off = F.element_at(F.array(*[F.lit(int(o)) for o in offsets]),
                       (F.col("stratum") + F.lit(1)).cast("int"))
    return (sk.withColumn("rank", F.row_number().over(w) - F.lit(1))
            .withColumn("part", F.pmod(F.col("rank") + off.cast("long"), F.lit(K)))
            .drop("rank", "key")), sk
