"""No ISA-flagged code can run on a CPU that lacks the ISA, unless a variant of that ISA was chosen.

The extension is built for the x86-64 baseline except csrc/kernels/*_avx2.cpp and *_avx512.cpp,
whose code lives in the namespaces sparselab::isa_avx2 and sparselab::isa_avx512
(csrc/kernels/isa_namespace.h). If an ISA-flagged file emitted code that baseline code also uses
(a std:: template, an inline function: anything the linker keeps one copy of), the linker could
keep the ISA-flagged copy, and baseline code would die with SIGILL on a CPU without that ISA.

The proof is the built extension itself: disassemble it, list every function that executes an
AVX/AVX2/FMA instruction (any VEX-encoded instruction, ymm registers) or an AVX-512 one (zmm or
mask registers, xmm/ymm 16-31, EVEX-only mnemonics, embedded broadcast or rounding), and check
that each carries the ISA namespace of a variant of that ISA in its symbol. Needs objdump and the
extension's symbol table: the build tree keeps an unstripped copy (CMakeLists.txt), matched to
the imported module by the build hash embedded in both.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sparselab import _C

ROOT = Path(__file__).resolve().parents[2]

# AVX-512: registers and syntax only EVEX encodes, then EVEX-only mnemonics (AT&T syntax).
_EVEX_OPERAND = re.compile(r"%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2\d|3[01])\b|\{1to\d+\}|-sae\}|\{sae\}")
_EVEX_MNEMONIC = re.compile(
    r"^(k(mov|and|andn|or|xor|xnor|not|test|ortest|shift[lr]|unpck|add)[bwdq]"
    r"|v\w*(32x[248]|64x[24])"
    r"|vmovdq[au](8|16|32|64)|vpternlog|vperm[it]2|vpermw|vp?compress|vp?expand|vpconflict|vplzcnt"
    r"|vrndscale|vscalef|vgetexp|vgetmant|vfixupimm|vrange|vreduce|vrcp14|vrsqrt14|vfpclass"
    r"|vpro[lr]v?[dq]|vpsraq|vpsravw|vpsllvw|vpsrlvw|vpabsq|vpm(in|ax)[su]q|vpmullq|vpmadd52"
    r"|vcvtu|vcvt\w*2u|vcvt\w*qq|vcvtqq|valign[dq]|vpblendm|vblendm|vpcmpu?[bwdq]\b|vcmp\w*\{"
    r"|vpmov[dqw][bdw]\b|vpmovus|vpmovs[dqw][bdw]|vpmov\w*2m|vpmovm2|vdbpsadbw|vpbroadcastm"
    r"|vpshufbitqmb|vpermb|vpmultishiftqb|vpopcnt|vpshl?dv?|vdpbf16|vcvtne2ps2bf16)"
)
# AVX, AVX2, FMA: every VEX-encoded instruction starts with v (baseline x86-64 code has none).
# Excluded: the few non-SIMD v* instructions (VMX, verr/verw).
_VEX_MNEMONIC = re.compile(
    r"^v(?!m(call|launch|resume|xoff|xon|read|write|ptr|clear|func|load|save|run|mcall))"
    r"(?!err|erw)\w+"
)
_FUNCTION = re.compile(r"^[0-9a-f]+ <(.*)>:$")
_INSN = re.compile(r"^\s+[0-9a-f]+:\s+(\S+)\s*(.*)$")


def _candidates() -> list[Path]:
    """The imported module first, then the build tree's copies of it."""
    return [Path(_C.__file__)] + sorted((ROOT / "build").glob(f"*/{Path(_C.__file__).name}"))


def _disassemble(so: Path) -> str:
    proc = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", "-C", str(so)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _instructions(text: str):
    """(function, mnemonic, operands) for every instruction of a disassembly, in order."""
    current = None
    for line in text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = m.group(1)
            continue
        m = _INSN.match(line)
        if m and current is not None:
            yield current, m.group(1), m.group(2)


def _isa_use(text: str) -> dict[str, set[str]]:
    """{function: {'avx512', 'avx2'}} for every function using those instructions."""
    uses: dict[str, set[str]] = {}
    for current, mnemonic, operands in _instructions(text):
        if mnemonic.startswith(("rex", "lock", "rep", "notrack", "bnd", "data16", "cs", "ds")) and operands:
            parts = operands.split(None, 1)
            mnemonic, operands = parts[0], parts[1] if len(parts) > 1 else ""
        if _EVEX_OPERAND.search(operands) or _EVEX_MNEMONIC.match(mnemonic):
            uses.setdefault(current, set()).add("avx512")
        elif _VEX_MNEMONIC.match(mnemonic) or "%ymm" in operands:
            uses.setdefault(current, set()).add("avx2")
    return uses


@pytest.fixture(scope="module")
def disassembly() -> str:
    if _C.build_info()["arch"] != "x86_64":
        pytest.skip("x86-64 only: other architectures build no ISA-flagged x86 code")
    if shutil.which("objdump") is None:
        pytest.skip("objdump not installed (Debian: binutils); build safety not checked")
    build_hash = _C.build_info()["build_hash"].encode()
    for so in _candidates():
        if not so.is_file() or build_hash not in so.read_bytes():
            continue  # not this build
        text = _disassemble(so)
        if "sparselab::" in text:  # has a symbol table
            return text
    pytest.skip(
        "no unstripped copy of the imported extension (looked in the package and "
        f"{ROOT / 'build'}/*/); build safety not checked"
    )


def test_disassembly_sees_the_kernels(disassembly: str) -> None:
    """Guards the check below against passing vacuously (no symbols, or a detector that finds nothing)."""
    uses = _isa_use(disassembly)
    assert any("isa_avx512::" in f and "avx512" in isas for f, isas in uses.items()), (
        "no AVX-512 instruction found in any sparselab::isa_avx512 function"
    )
    assert any("isa_avx2::" in f and isas == {"avx2"} for f, isas in uses.items()), (
        "no AVX2/FMA instruction found in any sparselab::isa_avx2 function"
    )
    assert any("isa_scalar::" in f for f in re.findall(r"^[0-9a-f]+ <(.*)>:$", disassembly, re.M)), (
        "the scalar variants' functions are missing from the symbol table"
    )


def test_isa_instructions_only_in_that_isas_variants(disassembly: str) -> None:
    stray = []
    for function, isas in sorted(_isa_use(disassembly).items()):
        wide = "isa_avx512::" in function or "isa_avx512bf16::" in function
        if "avx512" in isas:
            ok = wide and "isa_avx2::" not in function
        else:
            ok = ("isa_avx2::" in function) != wide
        if not ok:
            stray.append(f"{'/'.join(sorted(isas))}: {function}")
    assert not stray, (
        "functions outside their ISA's namespace use that ISA's instructions "
        "(baseline code could run them on a CPU without it):\n" + "\n".join(stray[:40])
    )


_BF16_MNEMONIC = re.compile(r"^(vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16)\b")


def test_avx512_bf16_instructions_only_in_its_namespace(disassembly: str) -> None:
    """AVX512_BF16 instructions appear in sparselab::isa_avx512bf16 functions (they do appear:
    the dot-product dW) and nowhere else, where an AVX-512 CPU without them could run them."""
    if not any(row["isa"] == "avx512bf16" for row in _C.variant_table()):
        pytest.skip("this build has no avx512bf16 lines (its compiler lacks -mavx512bf16)")
    seen, stray = set(), set()
    for function, mnemonic, _ in _instructions(disassembly):
        if _BF16_MNEMONIC.match(mnemonic):
            (seen if "isa_avx512bf16::" in function else stray).add(function)
    assert seen, "no AVX512_BF16 instruction in any sparselab::isa_avx512bf16 function"
    assert not stray, "AVX512_BF16 instructions outside isa_avx512bf16:\n" + "\n".join(sorted(stray)[:20])


@pytest.mark.skipif(_C.build_info()["arch"] != "x86_64", reason="x86-64 ISA gates")
def test_avx512_gate_requires_avx2_and_fma() -> None:
    """The AVX-512 files are built with -mfma and use AVX2 forms: the gate asks for both."""
    full = {k: True for k in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "os_avx", "os_avx512")}
    assert _C._isa_unavailable_reason_for("avx512", full) == ""
    for missing in ("avx2", "fma", "os_avx", "os_avx512", "avx512f", "avx512vl"):
        reason = _C._isa_unavailable_reason_for("avx512", {**full, missing: False})
        assert reason, f"avx512 variants allowed on a CPU without {missing}"
    assert _C._isa_unavailable_reason_for("avx2", {**full, "fma": False})
    # This CPU: the gate agrees with its own features.
    f = _C.cpu_features()
    assert (_C.isa_unavailable_reason("avx512") == "") == all(f[k] for k in full)


@pytest.mark.skipif(_C.build_info()["arch"] != "x86_64", reason="x86-64 ISA gates")
def test_avx512bf16_gate_requires_avx512_and_the_bf16_extension() -> None:
    """The avx512bf16 files are the avx512 files' flags plus -mavx512bf16: the gate asks for all."""
    full = {
        k: True
        for k in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512bf16", "os_avx", "os_avx512")
    }
    assert _C._isa_unavailable_reason_for("avx512bf16", full) == ""
    assert "AVX512_BF16" in _C._isa_unavailable_reason_for("avx512bf16", {**full, "avx512bf16": False})
    for missing in ("avx512f", "os_avx512", "fma"):
        assert _C._isa_unavailable_reason_for("avx512bf16", {**full, missing: False})
    f = _C.cpu_features()
    assert (_C.isa_unavailable_reason("avx512bf16") == "") == all(f[k] for k in full)
