"""Environment variables: a bad value warns and keeps the default (Python and the compiled
extension agree). Layout: the library imports neither pandas nor matplotlib (the [bench] extra)."""

import os
import subprocess
import sys
import tempfile

import pytest

from sparselab import settings as env


def _python(code: str, **environ) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SPARSELAB_SCRATCH")}
    full.update(environ)
    # Run outside the checkout: `python -c` puts the working directory first on sys.path, and the
    # source tree's sparselab/ has no compiled _C after a non-editable install.
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        cwd=tempfile.gettempdir(),
    )


@pytest.mark.parametrize(
    "raw, mb",
    [
        (None, 4),
        ("0", 0),
        ("16", 16),
        (" 8 ", 8),
        ("-1", None),
        ("+3", None),
        ("1e3", None),
        ("4x", None),
        ("", None),
        ("inf", None),
        ("99999999999999999999999", None),
        (str((1 << 20) + 1), None),
    ],
)
def test_scratch_keep_mb_rule(raw, mb):
    assert env.scratch_keep_mb(raw) == mb


@pytest.mark.parametrize("raw, expect_mb", [("-1", 4), ("abc", 4), ("1e9", 4), ("12", 12)])
def test_scratch_keep_mb_in_the_extension_and_the_warning(raw, expect_mb):
    done = _python("import sparselab; print(sparselab._C.scratch_keep_bytes() >> 20)", SPARSELAB_SCRATCH_KEEP_MB=raw)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == expect_mb
    assert ("SPARSELAB_SCRATCH_KEEP_MB" in done.stderr) == (expect_mb == 4)


def test_library_imports_neither_pandas_nor_matplotlib():
    code = (
        "import sys, sparselab, sparselab.tuning.cli, sparselab.tuning.table, sparselab.tuning.tuner, "
        "sparselab.dispatch.wisdom, sparselab.dispatch.planner, sparselab.model.sparsify; "
        "print(sorted(m for m in ('pandas', 'matplotlib') if m in sys.modules))"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_library_prints_nothing_on_import_and_a_small_op():
    code = (
        "import torch, sparselab; from sparselab import ops, PaddedCSR; "
        "ops.spmm_fwd(PaddedCSR.random(8, 8, 0.5, seed=0), torch.randn(2, 8))"
    )
    done = _python(code, SPARSELAB_TUNING="off")
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""


def test_the_library_never_imports_the_tuner():
    """The planner finds the tuner through the sparselab.on_miss entry point, at its first miss."""
    code = (
        "import sys, torch, sparselab; layer = sparselab.SparseLinear(8, 4); layer(torch.randn(2, 8)); "
        "print('sparselab.tuning' in sys.modules)"
    )
    assert _python(code, SPARSELAB_TUNING="off").stdout.strip() == "False"
    assert _python(code, SPARSELAB_TUNING="on").stdout.strip() == "True"  # the miss loaded the hook


def test_max_isa_caps_the_registry_and_keys_the_table():
    """SPARSELAB_MAX_ISA takes every variant of a wider ISA away (a named one refuses to run), and
    a capped process tunes into a table of its own; a cap above the CPU is no cap, with a warning."""
    code = (
        "import sparselab, torch; from sparselab.dispatch import registry, wisdom; "
        "avail = {v.isa for v in registry.variants(available_only=True)}; "
        "print(registry.max_isa(), ','.join(sorted(avail)), wisdom.get_cache().path.name, sep='|'); "
        "W = sparselab.PaddedCSR.random(8, 8, 0.5)\n"
        "try:\n    sparselab.ops.spmm_fwd(W, torch.randn(2, 8), variant='avx2_tile32')\n"
        "except RuntimeError as e:\n    print('refused', e)\n"
    )
    capped = _python(code, SPARSELAB_MAX_ISA="scalar", SPARSELAB_TUNING="off")
    assert capped.returncode == 0, capped.stderr
    cap, isas, table = capped.stdout.split("\n")[0].split("|")
    assert cap == "scalar" and "avx2" not in isas and "avx512" not in isas
    assert "refused" in capped.stdout and "SPARSELAB_MAX_ISA=scalar" in capped.stdout
    free = _python(code, SPARSELAB_TUNING="off")
    assert free.stdout.split("\n")[0].split("|")[2] != table  # a table of its own
    widest = "avx512" if "avx512" in free.stdout.split("\n")[0] else "avx2"
    above = _python(code, SPARSELAB_MAX_ISA="neon" if widest == "avx512" else "avx512", SPARSELAB_TUNING="off")
    assert above.stdout.startswith("None") and "SPARSELAB_MAX_ISA" in above.stderr


def test_max_isa_avx512_takes_the_bf16_dot_product_away():
    """On an AVX512_BF16 CPU, SPARSELAB_MAX_ISA=avx512 leaves the AVX-512 lines and takes the
    dot-product dW lines away: a bfloat16 layer's AVX-512 dW then runs the widening line."""
    from sparselab import _C
    from sparselab.dispatch import registry

    if _C.isa_unavailable_reason("avx512bf16"):
        pytest.skip(f"avx512bf16: {_C.isa_unavailable_reason('avx512bf16')}")
    if "avx512bf16_dp128_cb1024" not in registry.names("sddmm_dw"):
        pytest.skip("this build has no avx512bf16 lines (its compiler lacks -mavx512bf16)")
    code = (
        "from sparselab.dispatch import registry; v = registry.get('sddmm_dw', 'avx512_rowreg128_cb1024'); "
        "dp = registry.get('sddmm_dw', 'avx512bf16_dp128_cb1024'); "
        "print(registry.max_isa(), registry.widest_isa(), dp.available, dp.reason, registry.bf16_twin(v).name, sep='|')"
    )
    free = _python(code, SPARSELAB_TUNING="off")
    assert free.returncode == 0, free.stderr
    assert free.stdout.strip().split("|") == ["None", "avx512bf16", "True", "", "avx512bf16_dp128_cb1024"]
    capped = _python(code, SPARSELAB_MAX_ISA="avx512", SPARSELAB_TUNING="off")
    assert capped.returncode == 0, capped.stderr
    cap, widest, available, reason, twin = capped.stdout.strip().split("|")
    assert (cap, widest, available, twin) == ("avx512", "avx512", "False", "avx512_rowreg128_cb1024_bf16")
    assert "SPARSELAB_MAX_ISA=avx512" in reason


@pytest.mark.parametrize(
    "raw, on, warns", [(None, True, False), ("off", False, False), ("on", True, False), ("0", True, True)]
)
def test_huge_pages_setting_from_the_environment(raw, on, warns):
    """SPARSELAB_HUGE_PAGES: 'off' turns the output hint off; a bad value warns and keeps it on."""
    environ = {"SPARSELAB_HUGE_PAGES": raw} if raw is not None else {}
    if raw is None and "SPARSELAB_HUGE_PAGES" in os.environ:
        pytest.skip("SPARSELAB_HUGE_PAGES is set in this environment")
    done = _python("from sparselab import settings; print(settings.huge_pages())", **environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == str(on)
    assert ("SPARSELAB_HUGE_PAGES" in done.stderr) == warns


def test_isa_order_is_cut_to_the_isas_the_build_compiled(monkeypatch):
    """A compiler without -mavx512bf16 builds no avx512bf16 lines: the x86 order (the caps and the
    widest ISA) is then scalar, avx2, avx512, and an aarch64 build's is scalar, neon."""
    from sparselab.dispatch import registry

    monkeypatch.setattr(registry, "_C_ISAS", {"scalar", "avx2", "avx512"})
    assert registry._compiled_orders() == [("scalar", "avx2", "avx512")]
    monkeypatch.setattr(registry, "_C_ISAS", {"scalar", "avx2", "avx512", "avx512bf16"})
    assert registry._compiled_orders() == [("scalar", "avx2", "avx512", "avx512bf16")]
    monkeypatch.setattr(registry, "_C_ISAS", {"scalar", "neon"})
    assert registry._compiled_orders() == [("scalar", "neon")]
    monkeypatch.setattr(registry, "_C_ISAS", {"scalar"})
    assert registry._compiled_orders() == []


@pytest.mark.parametrize("raw, expect_mb", [("-1", 128), ("abc", 128), ("1e3", 128), ("0", 0), (" 64 ", 64)])
def test_pool_mb_sets_the_extensions_pool_and_warns_on_a_bad_value(raw, expect_mb):
    done = _python("import sparselab; print(sparselab._C.block_pool_keep_bytes() >> 20)", SPARSELAB_POOL_MB=raw)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == expect_mb
    assert ("SPARSELAB_POOL_MB" in done.stderr) == (raw in ("-1", "abc", "1e3"))
