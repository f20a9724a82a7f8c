"""Parsing outside the API process: one child process per upload, under kernel limits that
scale with the upload.

A child forks from a forkserver that imported the parsers once (it starts in milliseconds,
not the seconds numpy, pyarrow and scikit-learn take to import), takes over the dataset's
row (its owner token, a heartbeat every ``HEARTBEAT_SECONDS``), lowers its priority and
sets its own limits before it reads a byte: ``RLIMIT_AS`` (address space on top of the
loaded modules: an allocation past it is a ``MemoryError``), and a CPU-time and a
wall-clock budget that grow with the bytes it parses (``ParseLimits.for_bytes``: the
upload, then what it decompresses to, as it is written) up to ``SODM_INGEST_CPU_SECONDS``
and ``SODM_INGEST_TIME_LIMIT_SECONDS``: a 30 MB file cannot buy ten CPU minutes. Past its
CPU budget the kernel sends SIGXCPU (SIGKILL at the ceiling), past its wall budget SIGALRM.

The child parses, stores and moves the row to ready or failed itself
(``app.services.data.dataset_catalog``), so an API process that dies meanwhile loses nothing; when
its heartbeat finds the row deleted (``DELETE /datasets/{id}``) or failed by the sweep, it
removes its files and exits. The API's watcher thread records a child the kernel killed
(naming the budget it ran out of), removes the upload's directory and calls back the
queue that started it (``app.services.data.ingest_queue``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext

from app.core.config import get_settings
from app.core.problems import ProblemError
from app.services.data import dataset_catalog as datasets
from app.services.data.upload_dirs import UploadDir
from app.services.filestore import storage

log = logging.getLogger(__name__)

_lock = threading.Lock()
_ctx: ForkServerContext | None = None
NICE = 5  # the child yields the cores to the API's requests
KILL_GRACE_SECONDS = 30  # past the wall-clock ceiling, the watcher kills a child that lives on
# the child refreshes its row this often (app.services.data.dataset_catalog)
HEARTBEAT_SECONDS = 10.0
# wall clock: three times the CPU budget (a niced child on a busy machine gets a third of
# a core, at worst) plus a slack (start-up, database round trips)
WALL_PER_CPU = 3
WALL_SLACK_SECONDS = 30
MB = 1 << 20


@dataclass(frozen=True)
class IngestRequest:
    """What the child needs: the row to finish (its upload lies in the row's
    ``UploadDir``), its tenant (the storage quota) and the form's options."""

    dataset_id: str
    tenant_id: str
    fmt: str
    label_column: str
    n_features: int | None
    sha256: str


@dataclass(frozen=True)
class ParseLimits:
    """The CPU-time and wall-clock budget of a parse of ``nbytes`` bytes."""

    nbytes: int
    cpu_seconds: int
    wall_seconds: int

    @classmethod
    def for_bytes(cls, nbytes: int) -> ParseLimits:
        """``SODM_INGEST_CPU_FLOOR_SECONDS`` + ``SODM_INGEST_CPU_SECONDS_PER_MB`` per MB, at
        most ``SODM_INGEST_CPU_SECONDS``; wall clock ``WALL_PER_CPU`` times that plus
        ``WALL_SLACK_SECONDS``, at most ``SODM_INGEST_TIME_LIMIT_SECONDS``."""
        s = get_settings()
        cpu = min(float(s.ingest_cpu_seconds),
                  s.ingest_cpu_floor_seconds + s.ingest_cpu_seconds_per_mb * nbytes / MB)
        wall = min(float(s.ingest_time_limit_seconds), WALL_PER_CPU * cpu + WALL_SLACK_SECONDS)
        return cls(nbytes, max(1, int(cpu)), max(1, int(wall)))

    def as_dict(self) -> dict[str, float]:
        return {"nbytes": self.nbytes, "cpu_seconds": self.cpu_seconds,
                "wall_seconds": self.wall_seconds}

    @classmethod
    def from_dict(cls, raw: dict[str, float]) -> ParseLimits | None:
        try:
            return cls(int(raw["nbytes"]), int(raw["cpu_seconds"]), int(raw["wall_seconds"]))
        except (KeyError, TypeError, ValueError):
            return None


def _context() -> ForkServerContext:
    global _ctx
    with _lock:
        if _ctx is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload([__name__])
            _ctx = ctx
        return _ctx


def warm() -> None:
    """Start the forkserver now (it imports the parsers: seconds) instead of at the first
    upload; called in a thread at API startup."""
    from multiprocessing import forkserver

    _context()
    forkserver.ensure_running()


def start(req: IngestRequest, on_exit: Callable[[], None]) -> None:
    """Start the child for ``req`` (it owns the upload's directory from now on) and the
    watcher that calls ``on_exit`` once the child has exited and its outcome is on the
    row."""
    proc = _context().Process(target=_child_main, args=(req, dict(os.environ)),
                              name=f"sodm-ingest-{req.dataset_id}", daemon=True)
    proc.start()
    threading.Thread(target=_watch, args=(proc, req, on_exit), daemon=True,
                     name=f"sodm-ingest-watch-{req.dataset_id}").start()


def limit_problem(exitcode: int | None, limits: ParseLimits | None = None) -> ProblemError:
    """The problem of a child that did not exit by itself (killed by a limit or a crash),
    naming the budget it had (``limits``; the ceilings when unknown)."""
    s = get_settings()
    cpu = limits.cpu_seconds if limits else s.ingest_cpu_seconds
    wall = limits.wall_seconds if limits else s.ingest_time_limit_seconds
    size = {"parsed_bytes": limits.nbytes} if limits else {}
    if exitcode in (-signal.SIGXCPU, -signal.SIGKILL):
        return ProblemError(413, "Ingest limit exceeded",
                            detail=f"parsing the upload used more than its {cpu} CPU seconds "
                                   "(SODM_INGEST_CPU_FLOOR_SECONDS + "
                                   "SODM_INGEST_CPU_SECONDS_PER_MB per MB, at most "
                                   "SODM_INGEST_CPU_SECONDS)",
                            type="ingest-cpu-limit", limit_seconds=cpu, **size)
    if exitcode in (-signal.SIGALRM, None):
        return ProblemError(413, "Ingest limit exceeded",
                            detail=f"parsing the upload took longer than its {wall} s (three "
                                   "times its CPU budget and 30 s, at most "
                                   "SODM_INGEST_TIME_LIMIT_SECONDS)",
                            type="ingest-time-limit", limit_seconds=wall, **size)
    return ProblemError(500, "Ingest failed",
                        detail="the parse ended abnormally; it was logged",
                        type="ingest-crashed")


def memory_problem() -> ProblemError:
    limit = get_settings().ingest_memory_bytes
    return ProblemError(413, "Ingest limit exceeded",
                        detail=f"parsing the upload needs more than {limit} bytes of memory "
                               "(SODM_INGEST_MEMORY_BYTES)",
                        type="ingest-memory-limit", limit_bytes=limit)


def _watch(proc: multiprocessing.process.BaseProcess, req: IngestRequest,
           on_exit: Callable[[], None]) -> None:
    upload = UploadDir(req.dataset_id)
    try:
        proc.join(get_settings().ingest_time_limit_seconds + KILL_GRACE_SECONDS)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            exitcode = None
        else:
            exitcode = proc.exitcode
        if exitcode != 0:
            problem = limit_problem(exitcode, ParseLimits.from_dict(upload.read_limits()))
            recorded = datasets.mark_failed(req.dataset_id, problem.body(),
                                            over_interrupted=True)
            if recorded:
                storage.remove_dataset_files(req.dataset_id)  # renamed into place, not ready
            log.warning("ingest of dataset %s ended with exit code %s (%s)", req.dataset_id,
                        exitcode, problem.type if recorded else "row no longer parsing")
    except Exception:  # noqa: BLE001 - the waiting request must be released
        log.exception("watching the ingest of dataset %s failed", req.dataset_id)
    finally:
        upload.remove()  # the child's own clean-up did not run when it was killed
        on_exit()


class _Budget:
    """The child's CPU and wall-clock budget, raised as the bytes to parse grow (the soft
    ``RLIMIT_CPU`` may rise up to the hard one, the ceiling; the alarm is re-armed)."""

    def __init__(self, upload: UploadDir) -> None:
        self.upload = upload
        self.started = time.monotonic()
        self.current: ParseLimits | None = None
        ceiling = get_settings().ingest_cpu_seconds
        resource.setrlimit(resource.RLIMIT_CPU, (ceiling, ceiling + 5))

    def grow(self, nbytes: int) -> None:
        limits = ParseLimits.for_bytes(nbytes)
        self.upload.write_limits(limits.as_dict())  # first: the watcher reads it
        if self.current is not None and (limits.cpu_seconds, limits.wall_seconds) == (
                self.current.cpu_seconds, self.current.wall_seconds):
            return
        self.current = limits
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        resource.setrlimit(resource.RLIMIT_CPU, (min(limits.cpu_seconds, hard), hard))
        left = limits.wall_seconds - (time.monotonic() - self.started)
        signal.alarm(max(1, int(left)))


def _limit_memory() -> None:
    with open("/proc/self/statm") as fh:  # address space already mapped (loaded modules)
        mapped = int(fh.read().split()[0]) * resource.getpagesize()
    cap = mapped + get_settings().ingest_memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))


def _heartbeat(req: IngestRequest, upload: UploadDir, stop: threading.Event) -> None:
    """Refresh the row while the parse runs; when the row is no longer this parse's
    (deleted, or failed by the sweep) remove what the parse wrote and exit at once."""
    while not stop.wait(HEARTBEAT_SECONDS):
        try:
            mine = datasets.heartbeat(req.dataset_id)
        except Exception:  # noqa: BLE001 - the database may be restarting; beat again later
            log.warning("heartbeat of dataset %s failed", req.dataset_id, exc_info=True)
            continue
        if not mine:
            log.info("dataset %s deleted or failed while parsed: parse stopped", req.dataset_id)
            upload.remove()
            storage.remove_dataset_files(req.dataset_id)
            os._exit(0)


def _child_main(req: IngestRequest, env: dict[str, str]) -> None:
    """The child: the parent's environment (its settings), the row taken over, limits,
    parse, record."""
    os.environ.clear()
    os.environ.update(env)
    get_settings.cache_clear()
    from app.core.db import get_engine, get_sessionmaker
    from app.core.logs import bound, configure

    get_engine.cache_clear()
    get_sessionmaker.cache_clear()
    s = get_settings()
    configure(s.log_format, s.log_level)
    upload = UploadDir(req.dataset_id)
    problem: dict[str, object] | None = None
    stop = threading.Event()
    with bound(dataset_id=req.dataset_id):
        try:
            if not upload.add_owner() or not datasets.take_over(req.dataset_id):
                return  # deleted while it waited for this child
            threading.Thread(target=_heartbeat, args=(req, upload, stop), daemon=True,
                             name="sodm-ingest-heartbeat").start()
            budget = _Budget(upload)
            budget.grow(upload.body.stat().st_size)
            _limit_memory()
            os.nice(NICE)
            datasets.parse_and_store(req.dataset_id, upload, tenant_id=req.tenant_id,
                                     fmt=req.fmt, label_column=req.label_column,
                                     n_features=req.n_features, sha256=req.sha256,
                                     on_bytes=budget.grow)
        except ProblemError as exc:
            problem = exc.body()
        except MemoryError:
            problem = memory_problem().body()
        except Exception:  # noqa: BLE001 - recorded as a problem, never a hung row
            log.exception("ingest of dataset %s failed", req.dataset_id)
            problem = limit_problem(1).body()
        finally:
            stop.set()
            signal.alarm(0)
            upload.remove()
        if problem is not None:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)
            datasets.mark_failed(req.dataset_id, problem)
            log.info("dataset %s refused: %s", req.dataset_id, problem.get("type"))
