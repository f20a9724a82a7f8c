"""Run independent tasks inline or in a process pool, with cooperative cancellation.

``n_jobs == 1`` runs every task in this process (no pickling, ``should_stop`` called
directly).  Otherwise a ``ProcessPoolExecutor`` with the *forkserver* start method (spawn where
forkserver is unavailable) runs them; workers are fresh interpreters that import ``solver``
(numba functions load from their on-disk cache, ``cache=True``, so compilation happens once per
machine, not per worker); the fork server preloads ``solver.sodm.hierarchy`` so workers start fast.
A stop request is forwarded to the workers through a manager ``Event``: the parent polls
``should_stop()`` while it waits and sets the event, and each task receives
``stop_event.is_set`` as its own ``should_stop``.  Results come back in task order, so the
outcome does not depend on ``n_jobs``.  Inside a daemonic process (a Celery prefork child),
which may not start children, tasks run inline with a ``RuntimeWarning``.  As with any
non-fork multiprocessing, a script that calls a solver with ``n_jobs > 1`` at import time
needs the ``if __name__ == "__main__":`` guard (workers re-import the main module).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["resolve_n_jobs", "TaskPool"]

_POLL_SECONDS = 0.2


def resolve_n_jobs(n_jobs: int | None) -> int:
    """``None`` -> 1; negative values count back from the number of CPUs (-1: all)."""
    if n_jobs is None:
        return 1
    n = int(n_jobs)
    if n == 0:
        raise ValueError("n_jobs must not be 0")
    cpus = os.cpu_count() or 1
    return max(1, cpus + 1 + n) if n < 0 else n


def _context():
    methods = mp.get_all_start_methods()
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        # the fork server imports the solver once; every worker forked from it inherits it
        ctx.set_forkserver_preload(["solver.sodm.hierarchy", "solver.linear.dsvrg"])
        return ctx
    return mp.get_context("spawn")


_WORKER_LIMITS: list = []


def _init_worker(blas_threads: int) -> None:
    """Give each worker its share of the cores for BLAS: n_jobs workers with a full-width
    OpenBLAS pool each oversubscribe the machine, and OpenBLAS threads spin while they wait
    (``docs/design-notes.md``)."""
    import scipy.linalg  # noqa: F401  (load scipy's BLAS too, so the limit covers it)
    from threadpoolctl import threadpool_limits

    _WORKER_LIMITS.append(threadpool_limits(limits=blas_threads, user_api="blas"))


def _call(fn: Callable, args: tuple, kwargs: dict, stop_event) -> Any:
    if stop_event is not None:
        kwargs = dict(kwargs, should_stop=stop_event.is_set)
    return fn(*args, **kwargs)


class TaskPool:
    """A reusable pool for ``fn(*args, should_stop=..., **kwargs)`` tasks (context manager)."""

    def __init__(self, n_jobs: int | None, should_stop: Callable[[], bool] | None = None):
        self.n_jobs = resolve_n_jobs(n_jobs)
        if self.n_jobs > 1 and mp.current_process().daemon:
            # e.g. a Celery prefork child: daemonic processes may not have children
            warnings.warn("running in a daemonic process: n_jobs > 1 falls back to inline "
                          "execution (same results)", RuntimeWarning, stacklevel=2)
            self.n_jobs = 1
        self.should_stop = should_stop
        self._executor: cf.ProcessPoolExecutor | None = None
        self._manager = None
        self._event = None

    def __enter__(self) -> TaskPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Shut the workers and the manager down."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self._manager is not None:
            self._manager.shutdown()
            self._manager = None
            self._event = None

    def _ensure(self, n_tasks: int) -> None:
        if self._executor is None:
            ctx = _context()
            blas = max(1, (os.cpu_count() or 1) // self.n_jobs)
            self._executor = cf.ProcessPoolExecutor(max_workers=self.n_jobs, mp_context=ctx,
                                                    initializer=_init_worker,
                                                    initargs=(blas,))
            if self.should_stop is not None:
                self._manager = ctx.Manager()
                self._event = self._manager.Event()

    def map(self, fn: Callable, tasks: Sequence[tuple[tuple, dict]]) -> list[Any]:
        """Run ``fn(*args, **kwargs, should_stop=...)`` for every ``(args, kwargs)``; results in
        task order."""
        if self.n_jobs == 1 or len(tasks) <= 1 and self._executor is None:
            return [fn(*a, should_stop=self.should_stop, **kw) for a, kw in tasks]
        self._ensure(len(tasks))
        assert self._executor is not None
        futs = [self._executor.submit(_call, fn, a, kw, self._event) for a, kw in tasks]
        pending = set(futs)
        while pending:
            done, pending = cf.wait(pending, timeout=_POLL_SECONDS)
            if self._event is not None and self.should_stop is not None \
                    and not self._event.is_set() and self.should_stop():
                self._event.set()
        return [f.result() for f in futs]

    @property
    def stop_requested(self) -> bool:
        """Whether a stop was forwarded to the workers."""
        return self._event is not None and self._event.is_set()
