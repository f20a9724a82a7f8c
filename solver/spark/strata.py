"""Distributed landmarks, strata and partition dealing (SODM step 1-2) on Spark DataFrames.

Reproduces ``solver.landmarks`` / ``solver.partition`` row for row without collecting the
data (at most the landmark candidate sample):

* Landmarks among a bounded candidate sample (the default, ``solver.sodm``'s
  ``landmark_candidates``): the candidates (``splitmix64(seed, row_id)`` below the local
  threshold) are collected, a few MB, and the local selection runs on them in the driver.
* Landmarks among all rows (pivoted incomplete Cholesky, largest residual first, ties to the
  lowest row index, stop when the residual is ``<= 1e-10`` times the largest diagonal):
  ``S`` passes.
  Pass ``s`` broadcasts the ``s`` pivots chosen so far (their rows, their Cholesky rows and
  residuals), every executor recomputes its rows' factor columns with exactly the local
  recursion ``l_t = (k(z, p_t) - l[:t].lp_t[:t]) / sqrt(r(p_t))``, ``r -= l_t^2`` (one kernel
  column per pivot, like the local code), and reduces its batch to the candidate with the
  largest residual; the driver keeps the best (S small rows per pass).
* Strata: ``solver.landmarks.assign_strata`` on each Arrow batch against the broadcast
  landmark rows.
* Dealing: ``key = splitmix64(seed, row_id)`` (``solver.partition``), mapped to a signed
  long that sorts like the unsigned key; ``rank = row_number() over (partition by stratum
  order by key, row_id) - 1``; ``part = (rank + offset[stratum]) mod K`` with offsets from
  the per-stratum counts: the local rule "global position in (stratum, key, row) order mod K".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from solver.spark.data import DataInfo, batch_X, model_space, sql

__all__ = ["select_landmarks_spark", "assign_partitions_spark", "LANDMARK_TOL"]

LANDMARK_TOL = 1e-10  # solver.landmarks.select_landmarks default
_SIGN = np.uint64(1 << 63)


def _sorted_model_rows(pdf: pd.DataFrame, info: DataInfo):
    pdf = pdf.sort_values("row_id", kind="stable")
    return pdf, model_space(batch_X(pdf, info), info)


def _dense_rows(Z) -> np.ndarray:
    return Z.toarray() if hasattr(Z, "toarray") else np.asarray(Z)


def _candidate_landmarks(base: Any, info: DataInfo, kernel: Any, n_landmarks: int,
                         n_rows: int, seed: int, max_candidates: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The bounded-candidate rule of ``solver.landmarks``: the rows whose
    ``splitmix64(seed, row_id)`` key is below the threshold (about ``max_candidates`` of
    them, a few MB) are collected in row-id order and the local greedy selection runs on
    them in the driver: one Spark job instead of one per landmark."""
    from solver.landmarks import is_candidate, select_landmarks

    def sample(batches):
        for pdf in batches:
            if len(pdf) == 0:
                continue
            rid = pdf["row_id"].to_numpy(dtype=np.int64)
            keep = is_candidate(rid.astype(np.uint64), n_rows, seed, max_candidates)
            if keep.any():
                pdf, Z = _sorted_model_rows(pdf[keep], info)
                yield pd.DataFrame({"row_id": pdf["row_id"].to_numpy(dtype=np.int64),
                                    "z": list(_dense_rows(Z))})

    rows = (base.select("row_id", *info.input_cols)
            .mapInPandas(sample, "row_id long, z array<double>").collect())
    if not rows:  # the local rule falls back to the first row
        first = base.select("row_id", *info.input_cols).orderBy("row_id").limit(1).toPandas()
        _, Z = _sorted_model_rows(first, info)
        return first["row_id"].to_numpy(dtype=np.int64), _dense_rows(Z)
    rows.sort(key=lambda r: r["row_id"])
    rid = np.asarray([r["row_id"] for r in rows], dtype=np.int64)
    Zc = np.vstack([np.asarray(r["z"], dtype=np.float64) for r in rows])
    idx = select_landmarks(Zc, kernel, n_landmarks, seed, tol=LANDMARK_TOL)
    return rid[idx], Zc[idx]


def select_landmarks_spark(base: Any, info: DataInfo, kernel: Any, n_landmarks: int,
                           n_rows: int, seed: int = 0, max_candidates: int | None = None
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Row ids (selection order) and model-space rows of up to ``n_landmarks`` landmarks,
    among all rows, or among about ``max_candidates`` sampled ones (seeded by ``seed``)."""
    from solver.kernels import kernel_diag, kernel_matrix

    if max_candidates is not None and int(max_candidates) < int(n_rows):
        return _candidate_landmarks(base, info, kernel, int(n_landmarks), int(n_rows),
                                    int(seed), int(max_candidates))
    S = min(int(n_landmarks), int(n_rows))
    pivots_z: list[np.ndarray] = []
    pivots_l = np.zeros((S, S))
    pivots_r: list[float] = []
    chosen: list[int] = []
    scale = None
    cols = ["row_id", *info.input_cols]
    for s in range(S):
        Pz = np.vstack(pivots_z) if pivots_z else None
        Lp = pivots_l.copy()
        rp = np.asarray(pivots_r, dtype=np.float64)
        taken = np.asarray(chosen, dtype=np.int64)

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

        rows = (base.select(*cols)
                .mapInPandas(best_of_batch,
                             "row_id long, r double, dmax double, z array<double>, "
                             "l array<double>")
                .collect())
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


def assign_partitions_spark(base: Any, info: DataInfo, kernel: Any, landmarks: np.ndarray,
                            n_partitions: int, seed: int) -> Any:
    """DataFrame ``row_id, stratum, part`` (finest partition) reproducing the local dealing."""
    from solver.landmarks import assign_strata
    from solver.partition import splitmix64

    F, Window = sql(base)
    K = int(n_partitions)
    Zl = np.asarray(landmarks, dtype=np.float64)

    def strata(batches):
        for pdf in batches:
            if len(pdf) == 0:
                continue
            pdf, Z = _sorted_model_rows(pdf, info)
            rid = pdf["row_id"].to_numpy(dtype=np.int64)
            st = assign_strata(Z, Zl, kernel)
            key = (splitmix64(seed, rid) ^ _SIGN).view(np.int64)
            yield pd.DataFrame({"row_id": rid, "stratum": st.astype(np.int64), "key": key})

    sk = base.select("row_id", *info.input_cols).mapInPandas(
        strata, "row_id long, stratum long, key long")
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
            .select("row_id", "stratum", "part"))
