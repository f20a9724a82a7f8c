"""Margin monitoring: the served margins ``y_hat * f(x)`` of every model, per time window,
against the distribution on the model's held-out data.

Every prediction (``app.services.inference.predictor.predict``, whatever route asked for it) hands
its decision values to this process's ``Recorder``: the margins are appended to a per model and
window list under a lock, nothing else on the request's path. A daemon thread folds them
every ``SODM_MONITOR_FLUSH_SECONDS`` into a ``Summary`` (count, sum, sum of squares, the
count inside the theta band, a histogram on the fixed ``GRID``) and upserts this process's
row of the window (``margin_windows``, keyed by model, window start and ``host:pid``); a
read adds up every API process's rows. Rows older than ``SODM_MONITOR_RETENTION_WINDOWS``
windows are deleted, so the record per model is bounded.

``report`` compares each window with the reference (the same summary on the held-out rows,
``models.margin_reference``, written by the worker at training): mean, variance, share
inside the band, the population stability index over the reference's deciles and the
Kolmogorov-Smirnov distance on the grid. A window with at least
``SODM_MONITOR_MIN_MARGINS`` margins and a PSI of ``SODM_MONITOR_PSI_THRESHOLD`` or more is
flagged as drifted.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.orm import MarginWindow, utcnow
from solver.margins import served_margins

log = logging.getLogger(__name__)

# the histogram grid: GRID_BINS bins of width 0.05 over [GRID_LO, GRID_HI) on the ODM
# margin scale (the band [1 - theta, 1 + theta] around 1), plus one bin below and one above
GRID_LO, GRID_HI, GRID_BINS = -4.0, 6.0, 200
N_COUNTS = GRID_BINS + 2
_SCALE = GRID_BINS / (GRID_HI - GRID_LO)
PSI_BINS = 10  # the PSI compares the shares in the reference's deciles
PSI_FLOOR = 1e-4  # a share of 0 counts as this much in the PSI's logarithm
# margins count at most this far from 0 in the sums: a finite margin of 1e200 (inputs such
# as 1e308 on a linear model) would make the sum of squares infinite, which a JSONB
# reference cannot hold and which poisons every later variance of its window
MARGIN_CLIP = 1e100
FOLD_AT = 1 << 20  # pending margins of one model and window that wake the flusher early
PRUNE_EVERY_SECONDS = 60.0


def grid_edges() -> list[float]:
    """The edges of the inner bins; the first count is below the first edge, the last
    count at or above the last."""
    return [float(e) for e in np.linspace(GRID_LO, GRID_HI, GRID_BINS + 1)]


def bin_counts(m: np.ndarray) -> np.ndarray:
    idx = np.floor((m - GRID_LO) * _SCALE)
    np.clip(idx, -1, GRID_BINS, out=idx)
    return np.bincount(idx.astype(np.int64) + 1, minlength=N_COUNTS)


@dataclass
class Summary:
    """Margins in aggregate: what adds up across processes and windows."""

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    inside: int = 0
    counts: np.ndarray = field(default_factory=lambda: np.zeros(N_COUNTS, dtype=np.int64))

    @classmethod
    def of(cls, m: np.ndarray, theta: float) -> Summary:
        m = np.clip(np.asarray(m, dtype=np.float64), -MARGIN_CLIP, MARGIN_CLIP)
        inside = int(np.count_nonzero((m >= 1.0 - theta) & (m <= 1.0 + theta)))
        return cls(int(m.size), float(m.sum()), float(np.dot(m, m)), inside, bin_counts(m))

    def add(self, other: Summary) -> None:
        self.n += other.n
        self.total += other.total
        self.total_sq += other.total_sq
        self.inside += other.inside
        self.counts = self.counts + other.counts

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def variance(self) -> float | None:
        if not self.n:
            return None
        mean = self.total / self.n
        return max(0.0, self.total_sq / self.n - mean * mean)

    @property
    def inside_share(self) -> float | None:
        return self.inside / self.n if self.n else None

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "total": self.total, "total_sq": self.total_sq,
                "inside": self.inside, "counts": [int(c) for c in self.counts]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Summary:
        counts = np.zeros(N_COUNTS, dtype=np.int64)
        raw = np.asarray(d.get("counts") or [], dtype=np.int64)[:N_COUNTS]
        counts[:raw.size] = raw
        return cls(int(d.get("n", 0)), float(d.get("total", 0.0)),
                   float(d.get("total_sq", 0.0)), int(d.get("inside", 0)), counts)


def reference_of(decision_values: np.ndarray, theta: float, source: str) -> dict[str, Any]:
    """The stored reference of a model: the summary of its served margins on rows it was
    not trained on (``source`` says which rows)."""
    return {**Summary.of(served_margins(decision_values), theta).to_json(),
            "theta": float(theta), "source": source}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def model_theta(est: Any) -> float:
    """The theta a fitted estimator used ("auto" resolved); 0 if it has none."""
    for value in (getattr(est, "theta_", None), getattr(est, "theta", None)):
        if (number := _number(value)) is not None:
            return number
    return 0.0


# ------------------------------------------------------------------------ comparison
def psi(live: np.ndarray, ref: np.ndarray) -> float | None:
    """Population stability index of ``live`` against ``ref`` (grid counts), over the
    reference's deciles (adjacent grid bins merged so each holds about a tenth of it)."""
    n_live, n_ref = int(live.sum()), int(ref.sum())
    if not n_live or not n_ref:
        return None
    cuts = np.searchsorted(np.cumsum(ref), np.arange(1, PSI_BINS) * n_ref / PSI_BINS,
                           side="right")
    bounds = np.unique(np.concatenate([[0], cuts + 1, [N_COUNTS]]))
    bounds = bounds[bounds <= N_COUNTS]
    p = np.add.reduceat(ref, bounds[:-1]) / n_ref
    q = np.add.reduceat(live, bounds[:-1]) / n_live
    p, q = np.maximum(p, PSI_FLOOR), np.maximum(q, PSI_FLOOR)
    return float(np.sum((q - p) * np.log(q / p)))


def ks(live: np.ndarray, ref: np.ndarray) -> float | None:
    """The largest distance between the two cumulative distributions on the grid."""
    n_live, n_ref = int(live.sum()), int(ref.sum())
    if not n_live or not n_ref:
        return None
    return float(np.max(np.abs(np.cumsum(live) / n_live - np.cumsum(ref) / n_ref)))


def compare(live: Summary, ref: Summary | None, *, threshold: float,
            min_margins: int) -> dict[str, Any]:
    """A window's (or several windows') statistics and drift against the reference."""
    out: dict[str, Any] = {"n": live.n, "mean": live.mean, "variance": live.variance,
                           "inside": live.inside_share, "psi": None, "ks": None,
                           "drift": None}
    if ref is not None and ref.n:
        out["psi"] = psi(live.counts, ref.counts)
        out["ks"] = ks(live.counts, ref.counts)
        if live.n >= min_margins and out["psi"] is not None:
            out["drift"] = bool(out["psi"] >= threshold)
    return out


# -------------------------------------------------------------------------- recording
@dataclass
class _Pending:
    theta: float
    arrays: list[np.ndarray] = field(default_factory=list)
    size: int = 0


class Recorder:
    """This process's served margins: pending arrays per (model, window start), folded into
    this process's window totals and written by ``flush`` (a window whose write failed
    stays dirty and is written by the next flush)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._windows: dict[tuple[str, int], Summary] = {}  # this process's totals
        self._dirty: dict[tuple[str, int], int] = {}  # changed since written: a version
        self._flush_lock = threading.Lock()
        self._last_prune = 0.0
        self.full = threading.Event()  # set when a pending list reaches FOLD_AT margins

    def observe(self, model_id: str, theta: float, decision_values: np.ndarray) -> None:
        """Record a prediction's margins (cheap: one ``abs`` and an append)."""
        m = served_margins(decision_values)
        width = get_settings().monitor_window_seconds
        key = (model_id, int(time.time()) // width * width)
        with self._lock:
            entry = self._pending.get(key)
            if entry is None:
                entry = self._pending[key] = _Pending(theta)
            entry.arrays.append(m)
            entry.size += m.size
            big = entry.size >= FOLD_AT
        if big:  # a flood between two flushes: the flusher folds it now, off this thread
            self.full.set()

    def _take(self) -> dict[tuple[str, int], _Pending]:
        with self._lock:
            taken, self._pending = self._pending, {}
            return taken

    def _fold(self, taken: dict[tuple[str, int], _Pending]) -> None:
        parts = {key: Summary.of(np.concatenate(e.arrays), e.theta)
                 for key, e in taken.items() if e.arrays}
        with self._lock:
            for key, part in parts.items():
                self._windows.setdefault(key, Summary()).add(part)
                self._dirty[key] = self._dirty.get(key, 0) + 1

    def flush(self) -> int:
        """Write this process's windows that changed since their last write; forget those
        that ended a window ago and are written; the rows written."""
        with self._flush_lock:
            self._fold(self._take())
            with self._lock:
                dirty = dict(self._dirty)
                rows = [self._row(key, self._windows[key]) for key in dirty]
            if rows:
                _upsert(rows)
            width = get_settings().monitor_window_seconds
            now = int(time.time())
            with self._lock:
                for key, version in dirty.items():
                    if self._dirty.get(key) == version:
                        del self._dirty[key]
                for key in [k for k in self._windows
                            if k[1] + 2 * width < now and k not in self._dirty]:
                    del self._windows[key]
            if time.monotonic() - self._last_prune >= PRUNE_EVERY_SECONDS:
                self._last_prune = time.monotonic()
                prune()
            return len(rows)

    def _row(self, key: tuple[str, int], summary: Summary) -> dict[str, Any]:
        model_id, start = key
        return {"model_id": model_id, "window_start": datetime.fromtimestamp(start, UTC),
                "source": f"{socket.gethostname()}:{os.getpid()}",  # this process, now
                "n": summary.n, "total": summary.total, "total_sq": summary.total_sq,
                "inside": summary.inside, "counts": [int(c) for c in summary.counts],
                "updated_at": utcnow()}


def _upsert(rows: list[dict[str, Any]]) -> None:
    """Insert or overwrite this process's rows (a model deleted for good is skipped)."""
    with session_scope() as s:
        if s.get_bind().dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        for row in rows:
            stmt = insert(MarginWindow).values(**row)
            stmt = stmt.on_conflict_do_update(
                index_elements=["model_id", "window_start", "source"],
                set_={k: getattr(stmt.excluded, k)
                      for k in ("n", "total", "total_sq", "inside", "counts", "updated_at")})
            try:
                with s.begin_nested():
                    s.execute(stmt)
            except IntegrityError:
                log.info("margins of unknown model %s dropped", row["model_id"])


def prune() -> int:
    s = get_settings()
    cutoff = utcnow() - timedelta(
        seconds=s.monitor_window_seconds * (s.monitor_retention_windows + 1))
    with session_scope() as session:
        return session.execute(delete(MarginWindow).where(
            MarginWindow.window_start < cutoff)).rowcount or 0


_recorder = Recorder()
_thread: threading.Thread | None = None
_stop = threading.Event()


def recorder() -> Recorder:
    return _recorder


def _loop() -> None:
    while not _stop.is_set():
        _recorder.full.wait(float(get_settings().monitor_flush_seconds))
        _recorder.full.clear()
        if _stop.is_set():
            return
        try:
            _recorder.flush()
        except Exception:  # noqa: BLE001 - the database may be restarting; keep the data
            log.warning("margin flush failed", exc_info=True)


def start() -> None:
    """Start this API process's flusher (the API lifespan)."""
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    _thread = threading.Thread(target=_loop, name="sodm-margins", daemon=True)
    _thread.start()


def stop() -> None:
    """Stop the flusher and write what is left (best effort)."""
    _stop.set()
    _recorder.full.set()
    try:
        _recorder.flush()
    except Exception:  # noqa: BLE001 - shutting down; the window loses this process's tail
        log.warning("last margin flush failed", exc_info=True)


# ---------------------------------------------------------------------------- reading
def live_windows(session: Session, model_id: str, windows: int
                 ) -> list[tuple[datetime, Summary]]:
    """The model's last ``windows`` windows (every API process added up), newest first."""
    width = get_settings().monitor_window_seconds
    now = int(time.time())
    since = datetime.fromtimestamp((now // width - windows + 1) * width, UTC)
    out: dict[datetime, Summary] = {}
    for row in session.scalars(select(MarginWindow).where(
            MarginWindow.model_id == model_id, MarginWindow.window_start >= since)):
        start = row.window_start if row.window_start.tzinfo else row.window_start.replace(
            tzinfo=UTC)
        out.setdefault(start, Summary()).add(_summary_of(row))
    return sorted(out.items(), key=lambda kv: kv[0], reverse=True)


def newest_windows(session: Session) -> list[tuple[Any, dict[str, Any]]]:
    """``(model row, comparison)`` of the newest window with traffic of every model served
    in the current or the previous window (the Prometheus gauges)."""
    from app.core.orm import Model

    s = get_settings()
    width = s.monitor_window_seconds
    since = datetime.fromtimestamp((int(time.time()) // width - 1) * width, UTC)
    newest: dict[str, tuple[datetime, Summary]] = {}
    for row in session.scalars(select(MarginWindow).where(MarginWindow.window_start >= since)):
        start = row.window_start if row.window_start.tzinfo else row.window_start.replace(
            tzinfo=UTC)
        summary = _summary_of(row)
        held = newest.get(row.model_id)
        if held is None or start > held[0]:
            newest[row.model_id] = (start, summary)
        elif start == held[0]:
            held[1].add(summary)
    if not newest:
        return []
    kw = {"threshold": s.monitor_psi_threshold, "min_margins": s.monitor_min_margins}
    out = []
    for m in session.scalars(select(Model).where(Model.id.in_(list(newest)))):
        ref = Summary.from_json(m.margin_reference) if m.margin_reference else None
        out.append((m, compare(newest[m.id][1], ref, **kw)))
    return out


def _summary_of(row: MarginWindow) -> Summary:
    return Summary.from_json({"n": row.n, "total": row.total, "total_sq": row.total_sq,
                              "inside": row.inside, "counts": row.counts})


def report(session: Session, model: Any, windows: int) -> dict[str, Any]:
    """``GET /models/{id}/monitoring``: the reference, each window and all of them together
    compared with it."""
    s = get_settings()
    width = s.monitor_window_seconds
    ref_json = model.margin_reference
    ref = Summary.from_json(ref_json) if ref_json else None
    theta = _number((ref_json or {}).get("theta"))
    if theta is None:
        theta = _number((model.params or {}).get("theta")) or 0.0
    kw = {"threshold": s.monitor_psi_threshold, "min_margins": s.monitor_min_margins}
    rows = live_windows(session, model.id, windows)
    total = Summary()
    out_windows = []
    for start, summary in rows:
        total.add(summary)
        out_windows.append({"start": start, "end": start + timedelta(seconds=width),
                            **compare(summary, ref, **kw)})
    live = compare(total, ref, **kw)
    live["counts"] = [int(c) for c in total.counts]
    reference = None
    if ref is not None:
        reference = {"n": ref.n, "mean": ref.mean, "variance": ref.variance,
                     "inside": ref.inside_share, "counts": [int(c) for c in ref.counts],
                     "source": ref_json.get("source")}
    return {"model_id": model.id, "window_seconds": width, "windows_asked": windows,
            "psi_threshold": s.monitor_psi_threshold, "min_margins": s.monitor_min_margins,
            "band": {"theta": theta, "lower": 1.0 - theta, "upper": 1.0 + theta},
            "grid": {"edges": grid_edges(), "below_first_edge": True,
                     "at_or_above_last_edge": True},
            "reference": reference, "live": live, "windows": out_windows}
