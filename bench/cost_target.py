"""Issue 34's cost target read off ``bench.auto_params`` records, per dataset and per host.

    python -m bench.cost_target LABEL=RECORD.json [LABEL=RECORD.json ...]

Item 1 of the issue: auto-ODM's CPU seconds (search + final fit) at most 1.0x the CV-tuned
SVC's (CV + refit) on every dataset with at least 5,000 training rows and at most 0.5x from
100,000, with the test-accuracy gap at least -0.3 points. The same run of one command
measures both sides, so each ratio compares like with like; ratios of different records
(hosts, commits) are set side by side, never combined. A record's gap is its own split's:
the issue reads phishing's over eight split seeds (``bench.auto_params --seeds``).

With one record the command prints its per-dataset table (what ``bench.auto_params`` prints
at the end of a run); with several, one row per record (its label, the CPU the record names
where it has one, the ratio on each dataset the target covers, missed ones in bold).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cpu import brief

MIN_ROWS = 5_000  # datasets the target covers: at least this many training rows
LARGE_ROWS = 100_000  # ... and from this many the tighter ratio
RATIO = 1.0
LARGE_RATIO = 0.5
GAP_POINTS = -0.3  # the least test-accuracy gap (points) the target accepts


@dataclass(frozen=True)
class CostRow:
    """One dataset of one record against item 1."""

    dataset: str
    n_train: int
    auto_cpu_s: float  # search + final fit
    svc_cpu_s: float  # CV + refit
    gap_points: float

    @property
    def ratio(self) -> float:
        """auto-ODM's CPU over the SVC's (infinite where the SVC's clock read nothing)."""
        return self.auto_cpu_s / self.svc_cpu_s if self.svc_cpu_s > 0 else float("inf")

    @property
    def target(self) -> float | None:
        """The largest ratio item 1 accepts here, or ``None`` under ``MIN_ROWS`` rows."""
        if self.n_train >= LARGE_ROWS:
            return LARGE_RATIO
        return RATIO if self.n_train >= MIN_ROWS else None

    @property
    def met(self) -> bool | None:
        target = self.target
        if target is None:
            return None
        return self.ratio <= target and self.gap_points >= GAP_POINTS


def cost_rows(record: dict[str, Any]) -> list[CostRow]:
    """Every dataset of a ``bench.auto_params`` record (its first seed where it has several)."""
    out: list[CostRow] = []
    for r in record["results"]:
        if any(row.dataset == r["dataset"] for row in out):
            continue
        a, s = r["auto_odm"], r["svc"]
        out.append(CostRow(r["dataset"], int(r["n_train"]), float(a["total_cpu_s"]),
                           float(s["search_cpu_s"]) + float(s["final_cpu_s"]),
                           float(r["gap_points"])))
    return out


def _verdict(row: CostRow) -> str:
    if row.met is None:
        return f"- (under {MIN_ROWS:,} rows)"
    return "met" if row.met else "**missed**"


def dataset_table(rows: list[CostRow]) -> str:
    """One record, one line per dataset."""
    out = ["| dataset | train rows | target | auto-ODM CPU s | SVC CPU s | ratio | gap (points) "
           "| item 1 |", "|" + "---|" * 8]
    for r in rows:
        target = f"{r.target:.1f}x" if r.target is not None else "-"
        out.append(f"| {r.dataset} | {r.n_train:,} | {target} | {r.auto_cpu_s:.1f} | "
                   f"{r.svc_cpu_s:.1f} | {r.ratio:.2f}x | {r.gap_points:+.2f} | "
                   f"{_verdict(r)} |")
    covered = [r for r in rows if r.met is not None]
    out.append(f"\nitem 1 met on {sum(bool(r.met) for r in covered)} of the {len(covered)} "
               f"datasets with at least {MIN_ROWS:,} training rows" if covered else
               f"\nitem 1 covers none of these datasets (under {MIN_ROWS:,} training rows)")
    return "\n".join(out)


def _cell(row: CostRow | None) -> str:
    if row is None:
        return "-"
    text = f"{row.ratio:.2f}x"
    return text if row.met else f"**{text}**"


def hosts_table(records: list[tuple[str, dict[str, Any]]]) -> str:
    """Several records, one line each: the ratio on every dataset the target covers."""
    per = [(label, rec, {r.dataset: r for r in cost_rows(rec)}) for label, rec in records]
    names: list[str] = []
    for _, _, rows in per:
        names += [n for n, r in rows.items() if r.target is not None and n not in names]
    out = ["| run | CPU | " + " | ".join(names) + " | item 1 |", "|" + "---|" * (len(names) + 3)]
    for label, rec, rows in per:
        covered = [rows[n] for n in names if n in rows]
        out.append(f"| {label} | {brief(rec.get('machine', {}).get('cpu'))} | "
                   + " | ".join(_cell(rows.get(n)) for n in names)
                   + f" | {sum(bool(r.met) for r in covered)}/{len(covered)} |")
    return "\n".join(out)


def read_records(items: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """``LABEL=RECORD.json`` arguments (the label defaults to the path) as (label, record)."""
    records = []
    for item in items:
        label, sep, path = item.rpartition("=")
        records.append((label if sep else path, json.loads(Path(path).read_text())))
    return records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", metavar="LABEL=RECORD.json",
                    help="a label for the table and a bench.auto_params --out record")
    records = read_records(ap.parse_args(argv).records)
    if len(records) == 1:
        print(dataset_table(cost_rows(records[0][1])))
    else:
        print(hosts_table(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
