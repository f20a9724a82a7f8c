"""Parsing outside the API process: one child process per upload, under kernel limits.

A child forks from a forkserver that imported the parsers once (it starts in milliseconds,
not the seconds numpy, pyarrow and scikit-learn take to import), lowers its priority and
sets its own limits before it reads a byte: ``RLIMIT_CPU`` (SIGXCPU, then SIGKILL),
``RLIMIT_AS`` (address space on top of the loaded modules: an allocation past it is a
``MemoryError``) and an ``alarm`` for wall-clock time. The child parses, stores and moves
the row to ready or failed itself (``app.services.datasets``), so an API process that dies
meanwhile loses nothing. The API's watcher thread records a child the kernel killed, and
resolves the future the upload request waits on.

An API process runs at most ``SODM_INGEST_CONCURRENCY`` parses at once (each may use up to
``SODM_INGEST_MEMORY_BYTES``): an upload takes a ``ParseSlot`` before its body is read and
gets a 429 ``ingest-busy`` problem with ``Retry-After`` when none is free.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import signal
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

from app.config import get_settings
from app.problems import ProblemError
from app.services import datasets, storage

log = logging.getLogger(__name__)

_lock = threading.Lock()
_ctx: ForkServerContext | None = None
_slots: threading.BoundedSemaphore | None = None
BUSY_RETRY_AFTER_SECONDS = 5
NICE = 5  # the child yields the cores to the API's requests
KILL_GRACE_SECONDS = 30  # past the wall-clock limit, the watcher kills a child that lives on


@dataclass(frozen=True)
class IngestRequest:
    """What the child needs: the row to finish, the upload on disk and the form's options."""

    dataset_id: str
    upload: str
    fmt: str
    label_column: str
    n_features: int | None
    sha256: str


class ParseSlot:
    """One of this process's parse slots, held from before the upload's body is read until
    its child exits (the watcher releases it) or the request fails before the child starts."""

    def __init__(self) -> None:
        self._held = True

    @classmethod
    def take(cls) -> ParseSlot:
        """A free slot, or a 429 ``ingest-busy`` problem."""
        if not _parse_slots().acquire(blocking=False):
            n = get_settings().ingest_concurrency
            raise ProblemError(429, "Too many uploads being parsed",
                               detail=f"this API process is parsing {n} uploads, its limit "
                                      "(SODM_INGEST_CONCURRENCY); retry shortly",
                               type="ingest-busy", limit=n,
                               headers={"Retry-After": str(BUSY_RETRY_AFTER_SECONDS)})
        return cls()

    def release(self) -> None:
        """Give the slot back (once; later calls do nothing)."""
        with _lock:
            held, self._held = self._held, False
        if held:
            _parse_slots().release()


def _parse_slots() -> threading.BoundedSemaphore:
    global _slots
    with _lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(get_settings().ingest_concurrency)
        return _slots


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


def start(req: IngestRequest, slot: ParseSlot) -> Future[None]:
    """Start the child for ``req`` (it owns the upload file from now on, the watcher the
    slot); the future resolves once the child has exited and its outcome is on the row."""
    done: Future[None] = Future()
    proc = _context().Process(target=_child_main, args=(req, dict(os.environ)),
                              name=f"sodm-ingest-{req.dataset_id}", daemon=True)
    proc.start()
    threading.Thread(target=_watch, args=(proc, req, done, slot), daemon=True,
                     name=f"sodm-ingest-watch-{req.dataset_id}").start()
    return done


def limit_problem(exitcode: int | None) -> ProblemError:
    """The problem of a child that did not exit by itself (killed by a limit or a crash)."""
    s = get_settings()
    if exitcode in (-signal.SIGXCPU, -signal.SIGKILL):
        return ProblemError(413, "Ingest limit exceeded",
                            detail=f"parsing the upload used more than {s.ingest_cpu_seconds} "
                                   "CPU seconds (SODM_INGEST_CPU_SECONDS)",
                            type="ingest-cpu-limit", limit_seconds=s.ingest_cpu_seconds)
    if exitcode in (-signal.SIGALRM, None):
        return ProblemError(413, "Ingest limit exceeded",
                            detail="parsing the upload took longer than "
                                   f"{s.ingest_time_limit_seconds} s "
                                   "(SODM_INGEST_TIME_LIMIT_SECONDS)",
                            type="ingest-time-limit", limit_seconds=s.ingest_time_limit_seconds)
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
           done: Future[None], slot: ParseSlot) -> None:
    try:
        proc.join(get_settings().ingest_time_limit_seconds + KILL_GRACE_SECONDS)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            exitcode = None
        else:
            exitcode = proc.exitcode
        if exitcode != 0:
            problem = limit_problem(exitcode)
            recorded = datasets.mark_failed(req.dataset_id, problem.body())
            log.warning("ingest of dataset %s ended with exit code %s (%s)", req.dataset_id,
                        exitcode, problem.type if recorded else "row no longer parsing")
    except Exception:  # noqa: BLE001 - the waiting request must be released
        log.exception("watching the ingest of dataset %s failed", req.dataset_id)
    finally:
        Path(req.upload).unlink(missing_ok=True)
        storage.ingest_tmp_path(req.dataset_id).unlink(missing_ok=True)  # if it was killed
        slot.release()
        done.set_result(None)


def _limit_self() -> None:
    s = get_settings()
    cpu = s.ingest_cpu_seconds
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    with open("/proc/self/statm") as fh:  # address space already mapped (loaded modules)
        mapped = int(fh.read().split()[0]) * resource.getpagesize()
    cap = mapped + s.ingest_memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))
    signal.alarm(s.ingest_time_limit_seconds)
    os.nice(NICE)


def _child_main(req: IngestRequest, env: dict[str, str]) -> None:
    """The child: the parent's environment (its settings), limits, parse, record."""
    os.environ.clear()
    os.environ.update(env)
    get_settings.cache_clear()
    from app.db import get_engine, get_sessionmaker
    from app.logs import bound, configure

    get_engine.cache_clear()
    get_sessionmaker.cache_clear()
    s = get_settings()
    configure(s.log_format, s.log_level)
    problem: dict[str, Any] | None = None
    with bound(dataset_id=req.dataset_id):
        try:
            _limit_self()
            datasets.parse_and_store(req.dataset_id, Path(req.upload), fmt=req.fmt,
                                     label_column=req.label_column,
                                     n_features=req.n_features, sha256=req.sha256)
        except ProblemError as exc:
            problem = exc.body()
        except MemoryError:
            problem = memory_problem().body()
        except Exception:  # noqa: BLE001 - recorded as a problem, never a hung row
            log.exception("ingest of dataset %s failed", req.dataset_id)
            problem = limit_problem(1).body()
        finally:
            Path(req.upload).unlink(missing_ok=True)
        if problem is not None:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)
            datasets.mark_failed(req.dataset_id, problem)
            log.info("dataset %s refused: %s", req.dataset_id, problem.get("type"))
