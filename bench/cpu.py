"""Which CPU a benchmark ran on: vendor, family, model and the vector extensions that decide
the kernels (``/proc/cpuinfo`` on Linux).

A VM's brand string is often generic ("Intel(R) Xeon(R) Processor", "AMD EPYC"), while two
hosts behind it can differ twofold in float32 GEMM (two "AMD EPYC" VMs with AVX-512 and the
same kernels: 53 and 112 G multiply-adds/s, docs/auto-params.md, "OpenBLAS's kernels");
family and model tell them apart in a record.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

__all__ = ["EXTENSIONS", "brief", "cpu_record", "describe", "parse_cpuinfo"]

# the flags recorded, in the order named: (flag in /proc/cpuinfo, name printed)
EXTENSIONS = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX-512 BF16"),
              ("amx_tile", "AMX"), ("asimd", "NEON"), ("sve", "SVE"))
CPUINFO = Path("/proc/cpuinfo")


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """``{"vendor", "family", "model", "model_name", "extensions"}`` of the first processor
    listed in ``/proc/cpuinfo``'s text (None where a field is missing)."""
    first: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if first:
                break
            continue
        key, _, value = line.partition(":")
        first.setdefault(key.strip(), value.strip())
    flags = set((first.get("flags") or first.get("Features") or "").split())

    def number(key: str) -> int | None:
        value = first.get(key)
        try:
            return int(value, 0) if value is not None else None
        except ValueError:
            return None

    return {"vendor": first.get("vendor_id") or first.get("CPU implementer"),
            "family": number("cpu family"), "model": number("model"),
            "model_name": first.get("model name"),
            "extensions": [name for flag, name in EXTENSIONS if flag in flags]}


def cpu_record() -> dict[str, Any]:
    """:func:`parse_cpuinfo` of this machine; off Linux, the platform's processor string."""
    try:
        return parse_cpuinfo(CPUINFO.read_text())
    except OSError:
        return {"vendor": None, "family": None, "model": None,
                "model_name": platform.processor() or None, "extensions": []}


def describe(info: dict[str, Any]) -> str:
    """One phrase, e.g. ``GenuineIntel family 6 model 167 (Intel(R) Xeon(R) Processor) with
    AVX2 / AVX-512 / AMX``."""
    parts = [info.get("vendor"),
             f"family {info['family']}" if info.get("family") is not None else None,
             f"model {info['model']}" if info.get("model") is not None else None,
             f"({info['model_name']})" if info.get("model_name") else None]
    head = " ".join(str(p) for p in parts if p) or "unknown"
    exts = info.get("extensions") or []
    return f"{head} with " + (" / ".join(exts) if exts else "none of " + "/".join(
        name for _, name in EXTENSIONS))


def brief(info: dict[str, Any] | None) -> str:
    """:func:`describe` in a few words for a table cell, e.g. ``AMD 25/17, AVX-512`` (AVX2 left
    out where more follows); ``-`` for a record without one."""
    if not info:
        return "-"
    vendor = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel"}.get(info.get("vendor"),
                                                                 info.get("vendor") or "?")
    exts = [e for e in info.get("extensions") or [] if e != "AVX2"] or info.get("extensions")
    return f"{vendor} {info.get('family')}/{info.get('model')}, " + " / ".join(exts or ["-"])
