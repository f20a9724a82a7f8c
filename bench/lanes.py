"""Running benchmark jobs in one-core lanes (one thread per CPU, jobs taken in order); its
own module so that ``bench.run`` and ``bench.scaling`` share it without importing each
other."""

from __future__ import annotations

import queue
import threading


def in_lanes(jobs: list, lanes: list[int], work_fn) -> None:
    """Run ``work_fn(job, cpu)`` for every job, one thread per lane (CPU), jobs in order."""
    todo: queue.Queue = queue.Queue()
    for job in jobs:
        todo.put(job)
    errors: list[BaseException] = []

    def lane(cpu: int) -> None:
        while True:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            try:
                work_fn(job, cpu)
            except BaseException as exc:  # re-raised in the main thread
                errors.append(exc)
                return

    threads = [threading.Thread(target=lane, args=(cpu,)) for cpu in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
