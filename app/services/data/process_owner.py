"""Which process owns a piece of work, and whether it is still alive.

An owner token names one incarnation of one process: the kernel's boot id, the PID
namespace, the pid and the process's start time (clock ticks since boot), so a recycled pid
or a container with its own pid numbering never passes for the owner. A sweeper on the same
machine and in the same PID namespace can tell at once whether the owner is gone
(``alive`` is True or False); anywhere else (another host, a previous boot, no ``/proc``)
it cannot (None), and the owner's heartbeat decides.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

_UNKNOWN = "x"


@dataclass(frozen=True)
class Owner:
    """A process incarnation: ``boot.pidns.pid.start`` in its token form."""

    boot: str
    pidns: str
    pid: int
    start: str

    @property
    def token(self) -> str:
        return f"{self.boot}.{self.pidns}.{self.pid}.{self.start}"

    @classmethod
    def parse(cls, token: str | None) -> Owner | None:
        """The owner of a token, None for a malformed or missing one."""
        parts = (token or "").split(".")
        if len(parts) != 4 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3])


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def _boot_id() -> str:
    raw = _read("/proc/sys/kernel/random/boot_id")
    return raw.strip().replace("-", "") if raw else _UNKNOWN


def _pidns() -> str:
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return _UNKNOWN
    return "".join(ch for ch in link if ch.isdigit()) or _UNKNOWN


def _start_ticks(pid: int) -> str | None:
    """Field 22 of ``/proc/{pid}/stat`` (the command name, field 2, may hold spaces and
    parentheses: split after its last ``)``)."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    fields = raw.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def me() -> Owner:
    """This process (read afresh: a forked child is not its parent)."""
    pid = os.getpid()
    return Owner(_boot_id(), _pidns(), pid, _start_ticks(pid) or _UNKNOWN)


def alive(token: str | None) -> bool | None:
    """True / False when this process can tell (same boot and PID namespace), else None."""
    owner = Owner.parse(token)
    if owner is None:
        return None
    here = me()
    if _UNKNOWN in (owner.boot, owner.pidns, owner.start) or (owner.boot, owner.pidns) != (
            here.boot, here.pidns):
        return None
    start = _start_ticks(owner.pid)
    if start is None:
        return False
    # a zombie (exited, not yet reaped) is gone: its work can no longer progress
    stat = _read(f"/proc/{owner.pid}/stat") or ""
    state = stat.rsplit(")", 1)[-1].split()[:1]
    return start == owner.start and state != ["Z"]
