"""What recording the served margins (``app.services.inference.monitoring``) costs a prediction, in
one process, so that the machine's load hits both sides alike.

It runs ``app.services.inference.predictor.predict`` (the path every prediction route shares: cached
model, the evaluation slot and micro-batcher, the kernel sum, the margin record, the answer's
labels) on the ``bench.serving`` model (SODM rbf on ijcnn1), for request sizes of 1, 64 and
1000 rows, in rounds that alternate the recording on and off (``Recorder.observe`` replaced
by a no-op), and prints the median CPU seconds of this process per call of each, their
ratio (and the median of the ratios of adjacent rounds), and ``observe``'s own time. The
flush (fold and one database write per window) runs on its own thread every
``SODM_MONITOR_FLUSH_SECONDS``; its fold is timed apart (``Summary.of`` of 2^20 margins).
``bench.serving`` measures whole requests on the real stack, before and after, where a
shared machine's noise is larger than this cost.

    .venv/bin/python -m bench.margin_recording
    .venv/bin/python -m bench.margin_recording --rounds 40 --sizes 1 64
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.serving import ensure_model, test_rows


@dataclass
class _Row:
    """What ``predictor.predict`` reads of a model row."""

    id: str
    name: str
    version: int
    n_features: int
    file_sha256: str


async def _calls(predict: Any, m: _Row, X: np.ndarray, repeat: int) -> float:
    """CPU seconds of this process per call over ``repeat`` sequential calls."""
    t0 = time.process_time()
    for _ in range(repeat):
        await predict(m, X)
    return (time.process_time() - t0) / repeat


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 1000])
    args = ap.parse_args(argv)

    data_dir = Path(tempfile.mkdtemp(prefix="sodm-bench-margins-"))
    os.environ["SODM_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("SODM_PREDICT_THREADS", "1")
    from threadpoolctl import threadpool_limits

    from app.core.config import get_settings
    from app.services.inference import monitoring, predictor

    get_settings.cache_clear()
    from app.services.inference.evaluator import ServingModel
    from solver.io.model_io import loads

    model_bytes = ensure_model().read_bytes()
    m = _Row("bench", "bench", 1, 22, hashlib.sha256(model_bytes).hexdigest())
    predictor.remember(m.id, ServingModel(loads(model_bytes)))  # no database here
    rec = monitoring.recorder()
    observe = rec.observe
    out: dict[str, Any] = {"sizes": {}}

    async def run() -> None:
        sm = await predictor.load_async(m)
        theta = monitoring.model_theta(sm.est)
        for n in args.sizes:
            X = test_rows(n)
            repeat = max(3, 400 // n)
            on, off = [], []
            await _calls(predictor.predict, m, X, 3)  # warm
            for _ in range(args.rounds):
                rec.observe = observe  # type: ignore[method-assign]
                on.append(await _calls(predictor.predict, m, X, repeat))
                rec.observe = lambda *_a: None  # type: ignore[method-assign]
                off.append(await _calls(predictor.predict, m, X, repeat))
            rec.observe = observe  # type: ignore[method-assign]
            F = sm.decision(X)
            t0 = time.perf_counter()
            for _ in range(1000):
                observe("bench-observe", theta, F)
            alone = (time.perf_counter() - t0) / 1000
            a, b = float(np.median(on)), float(np.median(off))
            paired = float(np.median(np.asarray(on) / np.asarray(off)))
            out["sizes"][str(n)] = {"cpu_s_per_call_recording": a,
                                    "cpu_s_per_call_without": b, "ratio_of_medians": a / b,
                                    "median_paired_ratio": paired, "observe_s": alone}
            print(f"rows {n:>5}: predict {b * 1e3:8.3f} ms CPU without, {a * 1e3:8.3f} ms "
                  f"with the record (ratio {a / b:.4f}, paired rounds {paired:.4f}); "
                  f"observe alone {alone * 1e6:.1f} us ({alone / b:.2%} of the call)")

    with threadpool_limits(1):  # as in an API process's evaluation slots
        asyncio.run(run())
    margins = np.abs(np.random.default_rng(0).normal(1.0, 0.4, 1 << 20))
    t0 = time.perf_counter()
    monitoring.Summary.of(margins, 0.2)
    out["fold_2e20_margins_s"] = time.perf_counter() - t0
    print(f"folding 2^20 margins (flush thread): {out['fold_2e20_margins_s'] * 1e3:.1f} ms")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
