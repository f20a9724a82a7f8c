"""How many API processes ``sodm serve`` / ``sodm run`` start: ``--workers``, else
``SODM_API_WORKERS``, else one per core this process may use (CPU affinity, lowered to a
cgroup v2 quota), at most ``MAX_API_WORKERS``; the evaluation slots of each process are
the cores divided by them."""

from __future__ import annotations

import os

from app.cli import api_command, api_workers
from app.core import cores
from app.core.config import get_settings
from app.services.inference.batcher import default_slots


def test_cgroup_quota_lowers_the_cores(tmp_path, monkeypatch) -> None:
    quota = tmp_path / "cpu.max"
    for text, expected in (("max 100000\n", None), ("150000 100000\n", 1.5),
                           ("200000 100000", 2.0), ("garbage", None)):
        quota.write_text(text)
        assert cores._quota(quota) == expected
    assert cores._quota(tmp_path / "absent") is None
    affinity = len(os.sched_getaffinity(0))
    quota.write_text("100000 100000")
    monkeypatch.setattr(cores, "CGROUP_CPU_MAX", quota)
    assert cores.available_cores() == 1
    quota.write_text("max 100000")
    assert cores.available_cores() == affinity
    assert cores.default_api_workers() == min(affinity, cores.MAX_API_WORKERS)


def test_flag_then_setting_then_cores(monkeypatch) -> None:
    monkeypatch.delenv("SODM_API_WORKERS", raising=False)
    get_settings.cache_clear()
    try:
        assert api_workers() == cores.default_api_workers()
        assert api_workers(3) == 3
        monkeypatch.setenv("SODM_API_WORKERS", "5")
        get_settings.cache_clear()
        assert api_workers() == 5 and api_workers(2) == 2
    finally:
        get_settings.cache_clear()
    assert "--workers" not in api_command("127.0.0.1", 8000)
    cmd = api_command("127.0.0.1", 8000, 3)
    assert cmd[cmd.index("--workers") + 1] == "3" and "--no-access-log" in cmd
    # each process's evaluation slots share the cores
    assert default_slots(1) == cores.available_cores()
    assert default_slots(cores.available_cores() * 4) == 1
