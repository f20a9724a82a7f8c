"""Does the ``lam`` the auto search chooses on its subsample carry over to all rows?

    python -m bench.auto_lam_transfer [--datasets NAME ...] [--betas B ...] [--out FILE.json]

A design study on validation rows only (no test file is read). Per dataset, the training
split of ``bench.data`` is split 80/20 again (stratified, seed 1, as ``bench.auto_params
--design`` does); the auto search (``SODMClassifier.choose_auto``, every other parameter at
its default) runs on the 80 %, then SODM fits all of it with the chosen gamma and theta and
``lam * (n / m) ** beta`` for each ``beta``, where ``n`` is the rows of that fit and ``m``
the training rows of the search's CV fits on its last rung. ODM's loss is an average over
the rows (``lam / m`` per row), so ``beta = 0`` keeps the regularisation per row (today's
rule) and ``beta = 1`` keeps the per-row loss weight of a summed loss constant, which is
what reusing an SVC's ``C`` tuned on a subsample does. Accuracy on the 20 % decides.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from typing import Any

from bench.auto_params import design_split
from bench.data import DATASETS, load_split

DEFAULT_BETAS = (0.0, 0.5, 1.0)


def run_dataset(name: str, betas: tuple[float, ...], seed: int) -> dict[str, Any]:
    from solver import SODMClassifier
    from solver.core.cputime import CpuClock

    sp = load_split(name, seed=seed)
    X, Xv, y, yv = design_split(sp.X_train, sp.y_train)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = SODMClassifier(lam="auto", gamma="auto", theta="auto",
                              random_state=seed).choose_auto(X, y)
    chosen = info["chosen"]
    m = info["rows"] * (info["folds"] - 1) / info["folds"]
    fits = []
    for beta in betas:
        lam = chosen["lam"] * (len(y) / m) ** beta
        est = SODMClassifier(lam=lam, gamma=chosen["gamma"], theta=chosen["theta"],
                             random_state=seed)
        with CpuClock() as clock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
        fits.append({"beta": beta, "lam": lam, "accuracy": float(est.score(Xv, yv)),
                     "fit_cpu_s": clock.seconds})
    return {"dataset": name, "n_fit": int(len(y)), "n_validation": int(len(yv)),
            "search_rows": info["rows"], "search_fit_rows": m, "chosen": chosen,
            "gamma_mult": chosen["gamma"] / info["gamma_scale"],
            "search_cpu_s": info["cpu_seconds"], "stop_reason": info["stop_reason"],
            "fits": fits}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--betas", nargs="+", type=float, default=list(DEFAULT_BETAS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the JSON record here")
    args = ap.parse_args(argv)
    betas = tuple(args.betas)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"# python -m bench.auto_lam_transfer {' '.join(argv or [])}".rstrip())
    print(f"# started {started}; accuracy on validation rows carved from the training split")
    print("| dataset | fit rows | search rows | search CPU s | chosen lam | gamma | theta | "
          + " | ".join(f"acc beta={b:g}" for b in betas) + " | "
          + " | ".join(f"fit CPU s beta={b:g}" for b in betas) + " |")
    print("|" + "---|" * (7 + 2 * len(betas)), flush=True)
    rows = []
    for name in args.datasets:
        r = run_dataset(name, betas, args.seed)
        rows.append(r)
        c = r["chosen"]
        print(f"| {name} | {r['n_fit']:,} | {r['search_rows']:,} | {r['search_cpu_s']:.1f} | "
              f"{c['lam']:.3g} | "
              f"{r['gamma_mult']:.3g}x | {c['theta']:.3g} | "
              + " | ".join(f"{f['accuracy']:.4f}" for f in r["fits"]) + " | "
              + " | ".join(f"{f['fit_cpu_s']:.1f}" for f in r["fits"]) + " |", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"command": "python -m bench.auto_lam_transfer " + " ".join(argv or []),
                       "started": started, "betas": list(betas), "results": rows}, fh,
                      indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
