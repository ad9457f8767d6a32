"""The CPU description (sparselab.dispatch.cpu) reads the OS, whichever `cpuinfo` is installed.

py-cpuinfo and py-cpuinfo2 both install a module named `cpuinfo`; the last installed wins and they
disagree (one reported a core's L2 as the L3). The tuning fingerprint and the benchmark reports'
machine table must match `lscpu` regardless.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from sparselab.dispatch import cpu, fingerprint

X86_CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse2 avx2 fma avx512f avx512bw
cache size\t: 1024 KB

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 26
model name\t: not the first processor
flags\t\t: fpu
"""

ARM_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes crc32 asimddp sve
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd40

processor\t: 1
Features\t: fp
"""


def test_parse_cpuinfo_takes_the_first_processor():
    x86 = cpu.parse_cpuinfo(X86_CPUINFO)
    assert x86["vendor_id"] == "AuthenticAMD"
    assert x86["cpu family"] == "25"
    assert x86["model name"] == "AMD EPYC 9R14 96-Core Processor"
    assert x86["flags"].split() == ["fpu", "sse2", "avx2", "fma", "avx512f", "avx512bw"]
    arm = cpu.parse_cpuinfo(ARM_CPUINFO)
    assert arm["features"].split()[-1] == "sve"
    assert arm["cpu part"] == "0xd40"


def _fake_cache(root, cpu_index, index, level, kind, size, shared):
    d = root / f"cpu{cpu_index}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
        (d / name).write_text(f"{value}\n")


def test_cache_sizes_count_instances_like_lscpu(tmp_path):
    # Four logical CPUs in two SMT pairs: L1d and L2 per core (2 instances), one L3.
    for c in range(4):
        core = f"{c - c % 2}-{c - c % 2 + 1}"
        _fake_cache(tmp_path, c, 0, 1, "Data", "48K", core)
        _fake_cache(tmp_path, c, 1, 1, "Instruction", "32K", core)
        _fake_cache(tmp_path, c, 2, 2, "Unified", "2048K", core)
        _fake_cache(tmp_path, c, 3, 3, "Unified", "105M", "0-3")
    (tmp_path / "cpufreq").mkdir()  # not a cpuN directory: ignored
    assert cpu.cache_sizes(tmp_path) == {
        "l1d": (48 << 10, 2),
        "l2": (2048 << 10, 2),
        "l3": (105 << 20, 1),
    }


def test_cache_sizes_without_sysfs_is_empty(tmp_path):
    assert cpu.cache_sizes(tmp_path) == {}


def _lscpu_caches() -> dict[str, tuple[int, int]]:
    out = subprocess.run(
        ["lscpu", "-B", "-C=LEVEL,TYPE,ONE-SIZE,ALL-SIZE"], capture_output=True, text=True, check=True
    ).stdout
    caches = {}
    for line in out.splitlines()[1:]:
        level, kind, one, total = line.split()
        if kind != "Instruction":
            caches["l1d" if level == "1" else f"l{level}"] = (int(one), int(total) // int(one))
    return caches


@pytest.mark.skipif(shutil.which("lscpu") is None, reason="lscpu (util-linux) is not installed")
@pytest.mark.skipif(not os.path.isdir("/sys/devices/system/cpu"), reason="no sysfs CPU description")
def test_cache_sizes_match_lscpu():
    assert cpu.describe()["caches"] == _lscpu_caches()


_PROBE = textwrap.dedent(
    """
    import json, sys
    from sparselab.dispatch import fingerprint
    from sparselab_bench import machine
    fp = fingerprint.cpu_description()
    info = machine.machine_info()
    print(json.dumps({"fp": fp, "caches": info["caches"], "slug": info["cpu_slug"],
                      "imported": "cpuinfo" in sys.modules}))
    """
)


def _probe(env) -> dict:
    # Run outside the checkout, so the installed package is imported, not ./sparselab.
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True, cwd=tempfile.gettempdir()
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_description_ignores_whichever_cpuinfo_module_is_installed(tmp_path):
    """A `cpuinfo` module that lies (as a mixed install of the two providers did) changes nothing;
    the test extra installs both real providers, so the clean run has them too."""
    (tmp_path / "cpuinfo.py").write_text(
        "def get_cpu_info():\n"
        "    return {'brand_raw': 'Wrong CPU', 'flags': ['mmx'], 'l2_cache_size': 1, 'l3_cache_size': 2}\n"
    )
    env = dict(os.environ)
    clean = _probe(env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    shadowed = _probe(env)
    assert shadowed == clean
    assert not clean["imported"]
    here = cpu.describe()
    assert clean["fp"]["brand"] == here["brand"] and clean["fp"]["isa_flags"]
    assert clean["caches"] == {level: list(size) for level, size in here["caches"].items()}


def test_fingerprint_keeps_isa_flags_and_per_instance_cache_sizes():
    fp = fingerprint.cpu_description()
    caches = cpu.describe()["caches"]
    assert fp["l2_cache"] == (caches["l2"][0] if "l2" in caches else None)
    assert fp["l3_cache"] == (caches["l3"][0] if "l3" in caches else None)
    assert all(fingerprint._ISA_FLAG.match(f) for f in fp["isa_flags"])
    assert "sse2" in fp["isa_flags"] or not fp["arch"].startswith(("x86", "AMD64"))
