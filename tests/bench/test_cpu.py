"""bench.cpu: the record of which CPU a benchmark ran on."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from bench.cpu import EXTENSIONS, cpu_record, describe, parse_cpuinfo

REPO = Path(__file__).resolve().parents[2]

# the first lines of /proc/cpuinfo's first two processors on an Intel VM (flags shortened)
INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 167
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 1
flags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile

processor\t: 1
vendor_id\t: SomeoneElse
cpu family\t: 25
model\t\t: 1
flags\t\t: fpu
"""
AMD_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 49
model name\t: AMD EPYC Processor
flags\t\t: fpu sse2 avx avx2 fma
"""
ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes sve
CPU implementer\t: 0x41
CPU part\t: 0xd40
"""


def test_the_first_processor_is_read_with_its_vector_extensions() -> None:
    info = parse_cpuinfo(INTEL)
    assert info == {"vendor": "GenuineIntel", "family": 6, "model": 167,
                    "model_name": "Intel(R) Xeon(R) Processor",
                    "extensions": ["AVX2", "AVX-512", "AVX-512 BF16", "AMX"]}
    assert describe(info) == ("GenuineIntel family 6 model 167 (Intel(R) Xeon(R) Processor) "
                              "with AVX2 / AVX-512 / AVX-512 BF16 / AMX")


def test_other_vendors_and_missing_fields() -> None:
    amd = parse_cpuinfo(AMD_AVX2)
    assert (amd["vendor"], amd["family"], amd["model"], amd["extensions"]) == \
        ("AuthenticAMD", 23, 49, ["AVX2"])
    arm = parse_cpuinfo(ARM)
    assert arm == {"vendor": "0x41", "family": None, "model": None, "model_name": None,
                   "extensions": ["NEON", "SVE"]}
    assert describe(arm) == "0x41 with NEON / SVE"
    none = parse_cpuinfo("")
    assert describe(none).startswith("unknown with none of AVX2/")


def test_this_machines_record_agrees_with_numpys_cpu_detection() -> None:
    # numpy's own CPUID reading (what numpy.show_runtime prints), a private module of numpy
    features = importlib.import_module("numpy._core._multiarray_umath").__cpu_features__
    assert {"AVX2", "ASIMD"} & set(features), "numpy names the x86 or Arm features it checked"
    info = cpu_record()
    assert info["vendor"]
    assert set(info["extensions"]) <= {name for _, name in EXTENSIONS}
    # numpy reads CPUID itself: the two must agree where both name the extension
    for numpy_name, ours in (("AVX2", "AVX2"), ("AVX512F", "AVX-512"), ("ASIMD", "NEON")):
        if numpy_name in features:
            assert features[numpy_name] == (ours in info["extensions"]), numpy_name


def test_a_record_with_its_cpu_names_it_in_the_report_machine_line(tmp_path: Path) -> None:
    from bench.report import render

    path = REPO / "bench" / "records" / "issue34-item3-rbf-0b5386f-xeon.json"
    results = json.loads(path.read_text())
    assert "cpu" not in results["machine"]  # recorded before bench.cpu

    def machine_line() -> str:
        return next(ln for ln in render(results, tmp_path, "img").splitlines()
                    if ln.startswith("- Machine:"))

    assert f"CPU `{results['machine']['cpu_model']}`, " in machine_line()
    results["machine"]["cpu"] = parse_cpuinfo(INTEL)
    assert f"CPU {describe(parse_cpuinfo(INTEL))}, 23.5 GB RAM" in machine_line()
