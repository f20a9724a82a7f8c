"""A job's history, bounded: every per-level record is kept, progress ticks are thinned.

A fit reports a record per level (SODM's levels, keyed ``level``) and may report one per
epoch or iteration (SVRG's ``epoch`` records: up to ``SODM_LIMIT_EPOCHS``). The job row holds
all level records and at most ``MAX_TICKS`` other records: when there are more, every other
one is dropped (the first and the newest always stay), so the ticks stay evenly spread over
the whole run whatever its length.
"""

from __future__ import annotations

from typing import Any

MAX_TICKS = 200


def is_level(record: dict[str, Any]) -> bool:
    return "level" in record


def thin(records: list[dict[str, Any]], max_ticks: int = MAX_TICKS) -> list[dict[str, Any]]:
    """``records`` with every level record and at most ``max_ticks`` others, in order."""
    ticks = [i for i, r in enumerate(records) if not is_level(r)]
    while len(ticks) > max_ticks:
        ticks = ticks[:-1][::2] + [ticks[-1]]
    keep = set(ticks)
    return [r for i, r in enumerate(records) if is_level(r) or i in keep]
