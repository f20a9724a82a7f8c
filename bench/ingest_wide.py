"""Parse and store short, wide uploads: CPU seconds and stored bytes per upload byte.

Two rows of many features are the uploads whose cost per byte was out of proportion
(issue 36): a Parquet file of 2 rows x N columns (its schema was rebuilt once per column,
quadratic in N) and a two-line LIBSVM file whose first line holds N features (stored dense:
one Parquet column per feature, ~300 bytes of overhead each). For each it generates the
file, then measures ``app.services.data.ingest.parse_file`` and
``app.services.filestore.storage.write_dataset_files`` in this process: CPU and wall seconds, the
layout and the stored bytes against the upload's bytes. Only those two stable functions
are called, so the same command measures an older checkout (``PYTHONPATH=<checkout>``).

    .venv/bin/python -m bench.ingest_wide --parquet 5000 20000 100000 --libsvm 200000 1000000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_parquet(path: Path, n_features: int) -> None:
    rng = np.random.default_rng(0)
    cols = {"label": pa.array([0, 1])}
    cols.update({f"c{j}": pa.array(rng.random(2)) for j in range(n_features)})
    pq.write_table(pa.table(cols), path)


def write_libsvm(path: Path, n_features: int) -> None:
    rng = np.random.default_rng(1)
    first = " ".join(f"{j}:{v:.6f}" for j, v in enumerate(rng.random(n_features), 1))
    path.write_text(f"1 {first}\n-1 1:1\n")


def measure(path: Path, fmt: str, work: Path) -> dict[str, object]:
    from app.services.data.ingest import parse_file
    from app.services.filestore import storage

    t0, c0 = time.perf_counter(), time.process_time()
    parsed = parse_file(path, fmt, "label")
    c1 = time.process_time()
    out = work / f"{path.stem}-stored"
    out.mkdir()
    meta = storage.write_dataset_files(out, parsed.X, parsed.y)
    t2, c2 = time.perf_counter(), time.process_time()
    stored = sum(p.stat().st_size for p in out.iterdir())
    return {"upload_mb": path.stat().st_size / 1e6, "parse_cpu_s": c1 - c0,
            "store_cpu_s": c2 - c1, "wall_s": t2 - t0, "layout": meta["layout"],
            "stored_mb": stored / 1e6, "stored_per_upload": stored / path.stat().st_size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parquet", type=int, nargs="*", default=[5000, 20000, 100000],
                    help="column counts of 2-row Parquet files")
    ap.add_argument("--libsvm", type=int, nargs="*", default=[200000, 1000000],
                    help="feature counts of the first line of 2-line LIBSVM files")
    args = ap.parse_args()
    print(f"{'file':<28} {'upload MB':>9} {'parse CPU s':>11} {'store CPU s':>11} "
          f"{'wall s':>7} {'layout':>7} {'stored MB':>9} {'stored/upload':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for fmt, counts, write in (("parquet", args.parquet, write_parquet),
                                   ("libsvm", args.libsvm, write_libsvm)):
            for n in counts:
                path = work / f"wide{n}.{fmt}"
                write(path, n)
                r = measure(path, fmt, work)
                print(f"{fmt + ' 2 x ' + format(n, ','):<28} {r['upload_mb']:>9.1f} "
                      f"{r['parse_cpu_s']:>11.1f} {r['store_cpu_s']:>11.1f} "
                      f"{r['wall_s']:>7.1f} {r['layout']:>7} {r['stored_mb']:>9.1f} "
                      f"{r['stored_per_upload']:>13.2f}", flush=True)


if __name__ == "__main__":
    main()
