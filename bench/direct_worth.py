"""What a direct Newton attempt costs in epochs of coordinate descent (``DIRECT_WORTH``,
``DIRECT_FIXED``).

``NewtonSchedule`` makes a direct attempt only when coordinate descent's extrapolated epochs
left exceed ``DIRECT_WORTH * |S|^2 / m + DIRECT_FIXED / (m |face|)`` (``|S|`` the attempt's
first face, ``|face|`` the sign rule's, ``m`` the rows the solve runs on): twice what an
attempt is expected to cost. This command prices it on partition-sized fits and fits the
size of the search's CV folds (``bench.single_fit``, each run its own process, one BLAS
thread):

* ``never``: no direct attempt (``--direct-worth inf``, ``--max-iter`` 100,000): ``E``
  epochs, ``T`` CPU s;
* ``one``: the same fit stopped after one epoch (``--max-iter 1``): the setup ``T1``;
* ``eager``: every attempt the face allows (``--direct-worth 0 --direct-fixed 0``): ``E0``
  epochs, ``T0`` s.

An epoch costs ``e = (T - T1) / (E - 1)``, the setup ``F = T1 - e``, and the attempts of
``eager`` ``A = T0 - F - E0 e``, or ``A / e`` epochs: ``c = (A / e) m / |S|^2`` with
``|S|`` the first face ``eager`` factored and ``m`` the fit's distinct rows (identical rows
are merged before the solve). It prints ``c`` per fit, their median, and the threshold that
is twice it, and per fit what the attempts cost beyond half the face term, in multiply-adds
of epochs of ``m |S|`` each (``DIRECT_FIXED`` is twice that on the small fits it decides);
``--compare V1 V2`` instead runs every fit at both values of ``DIRECT_WORTH`` (or, with
``--knob fixed``, of ``DIRECT_FIXED``), alternating::

    PYTHONPATH=. .venv/bin/python bench/direct_worth.py [--compare 0.06 0.1] \
        [--knob worth|fixed] [--rounds 2] [--datasets ijcnn1 cod-rna]

``docs/design-notes.md`` ("A direct step only when it pays", "An attempt's fixed cost") has
the derivations of both constants.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys

from solver.exact.newton_kernel import DIRECT_WORTH

# dataset, rows, lam, gamma multiple of the "scale" value, theta: the fits of the first
# derivation (bench/records/single-fit-direct-worth-ab.txt), the final-fit partitions of
# the headline auto-params run (docs/auto-params.md) and fits the size of its CV folds
FITS = [
    ("skin_nonskin", 11000, 1e3, 1, 0.8),
    ("skin_nonskin", 11000, 1e3, 10, 0.8),
    ("ijcnn1.t", 11000, 1e4, 10, 0.5),
    ("ijcnn1.t", 11000, 1e5, 10, 0.8),
    ("ijcnn1.t", 11000, 1e6, 3.16, 0.2),
    ("ijcnn1", 11000, 1e5, 10, 0.2),
    ("cod-rna", 11000, 1e5, 10, 0.2),
    ("cod-rna", 11000, 1e3, 10, 0.8),
    ("a9a", 11000, 1e3, 1, 0.8),
    ("phishing", 8844, 1e3, 10, 0.8),
    ("svmguide1", 3089, 1e3, 10, 0.8),
    ("ijcnn1", 9998, 1e5, 10, 0.2),
    ("ijcnn1.t", 11463, 1e6, 10, 0.2),
    ("cod-rna", 5413, 1e6, 0.1, 0.8),
    ("skin_nonskin", 5027, 1e4, 10, 0.5),
    ("cod-rna.t", 11318, 1e4, 0.1, 0.8),
    ("a9a", 10854, 5623.4, 0.1, 0.2),
    # fold-sized fits of the search's rungs (two thirds of a rung's rows) at settings the
    # headline run scored there
    ("ijcnn1", 1234, 1e5, 0.1, 0.2),
    ("ijcnn1", 3703, 1e5, 10, 0.1),
    ("ijcnn1.t", 2264, 1e6, 1, 0.2),
    ("ijcnn1.t", 6793, 1e6, 1, 0.2),
    ("ijcnn1.t", 6793, 1e5, 1, 0.8),
    ("cod-rna", 4410, 1e6, 0.1, 0.8),
    ("a9a", 2411, 1e4, 0.1, 0.2),
    ("svmguide1", 2059, 1e3, 1, 0.8),
]

# the ``never`` runs' epoch limit
NEVER_MAX_ITER = 100_000

_LINE = re.compile(r"distinct=(\d+) .*: ([\d.]+) CPU s, epochs \[(\d+)\], faces factored "
                   r"\[([\d, ]*)\]")


def _fit(spec: tuple, *extra: str) -> tuple[int, float, int, list[int]]:
    """(distinct rows, CPU s, epochs, faces factored) of one ``bench.single_fit`` process."""
    name, rows, lam, gmult, theta = spec
    out = subprocess.run(
        [sys.executable, "-m", "bench.single_fit", "--dataset", name, "--rows", str(rows),
         "--lam", repr(lam), "--gamma-mult", repr(gmult), "--theta", repr(theta), *extra],
        capture_output=True, text=True, check=True).stdout
    m = _LINE.search(out)
    if m is None:
        raise RuntimeError(f"unexpected bench.single_fit output: {out!r}")
    faces = [int(f) for f in m.group(4).split(",") if f.strip()]
    return int(m.group(1)), float(m.group(2)), int(m.group(3)), faces


def _label(spec: tuple) -> str:
    name, rows, lam, gmult, theta = spec
    return f"{name} {rows} lam {lam:g} {gmult:g}x theta {theta:g}"


def derive(fits: list[tuple]) -> None:
    cs = []
    for spec in fits:
        # (max_iter far out: an attempt is made anyway where coordinate descent's epochs left
        # reach max_iter)
        m, t, e, _ = _fit(spec, "--direct-worth", "inf", "--max-iter", str(NEVER_MAX_ITER))
        _, t1, _, _ = _fit(spec, "--direct-worth", "inf", "--max-iter", "1")
        _, t0, e0, faces0 = _fit(spec, "--direct-worth", "0", "--direct-fixed", "0")
        line = (f"{_label(spec)}: distinct {m}; never {t:.2f} s {e} epochs; one epoch "
                f"{t1:.2f} s; eager {t0:.2f} s {e0} epochs faces {faces0}")
        if not faces0 or e < 2:
            print(line + " (no attempt to price)", flush=True)
            continue
        ep = (t - t1) / (e - 1)
        setup = t1 - ep
        attempt = t0 - setup - e0 * ep
        c = attempt / ep * m / faces0[0] ** 2
        cs.append(c)
        # what the attempts cost beyond the face term at half DIRECT_WORTH, in multiply-adds
        # of epochs of m |S| each (DIRECT_FIXED is twice this on the fits it decides)
        beyond = (attempt / ep - DIRECT_WORTH / 2 * faces0[0] ** 2 / m) * m * faces0[0]
        print(line + f"; epoch {ep * 1e3:.1f} ms, setup {setup:.2f} s, attempts "
              f"{attempt:.2f} s = {attempt / ep:.0f} epochs, c = {c:.4f}, beyond the "
              f"face term {beyond:.2g}", flush=True)
    if cs:
        med = statistics.median(cs)
        print(f"c over {len(cs)} fits: median {med:.4f} (min {min(cs):.4f}, max {max(cs):.4f});"
              f" twice the median: {2 * med:.3f}")


def compare(fits: list[tuple], worths: list[float], rounds: int, knob: str) -> None:
    flag, name = {"worth": ("--direct-worth", "DIRECT_WORTH"),
                  "fixed": ("--direct-fixed", "DIRECT_FIXED")}[knob]
    totals = {w: 0.0 for w in worths}
    for r in range(rounds):
        for spec in fits:
            for w in worths:
                _, t, e, faces = _fit(spec, flag, repr(w))
                if r == rounds - 1:
                    totals[w] += t
                print(f"round {r}, {name} {w:g}: {_label(spec)}: {t:.2f} CPU s, "
                      f"epochs {e}, faces {faces}", flush=True)
    print("last round's total CPU s: " + ", ".join(f"{w:g}: {t:.2f}"
                                                   for w, t in totals.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", type=float, nargs="+", default=None)
    ap.add_argument("--knob", choices=("worth", "fixed"), default="worth",
                    help="what --compare sets: DIRECT_WORTH (default) or DIRECT_FIXED")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--datasets", nargs="+", default=None,
                    help="only the fits on these datasets (default: all of FITS)")
    a = ap.parse_args(argv)
    fits = [f for f in FITS if a.datasets is None or f[0] in a.datasets]
    if a.compare:
        compare(fits, a.compare, a.rounds, a.knob)
    else:
        derive(fits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
