"""`sparselab-tune`: tune ahead of time and manage the tuning cache.

    sparselab-tune                      tune the standard grid of common layers, print the table
    sparselab-tune --quick              a tiny grid (CI smoke test)
    sparselab-tune --model SPEC         layers from JSON (file or inline): [{out, in, n?, sparsity, block?}]
    sparselab-tune --module pkg.mod:fn  layers of the model fn() builds (its sparse linear layers)
    sparselab-tune --block 4x1,8x1      also the block-sparse ops of those layers at these block shapes
    sparselab-tune --dtype bfloat16     a bfloat16 model's keys (float32,bfloat16: both)
    sparselab-tune --show [--wide|--json]  print this machine's tuned keys (--wide: every column;
                                        JSON: for tools)
    sparselab-tune --export FILE        write this machine's table to FILE
    sparselab-tune --import FILE        merge FILE (refused if tuned on another CPU/build; --force)
    sparselab-tune --clear              forget this machine's table

    sparselab-tune --ship DIR           write this machine's table as the shipped one of its CPU class

Actions combine in the order clear, import, tune, export, ship, show. Exit status: 0 on success, 1 when
any key failed to tune (the others are kept), 2 on a user mistake (``error: ...``). ``-v`` shows
each key's tuning (the ``sparselab`` logger at INFO) on stderr.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import sys

import torch
from tqdm import tqdm

from sparselab import settings
from sparselab.dispatch import system_wisdom, wisdom
from sparselab.dispatch.wisdom import ForeignFingerprintError

from . import grids, hook, interference, ship, table, tuner
from .grids import SpecError


class UserError(Exception):
    pass


def _parse_ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise UserError(f"{what} must be a comma-separated list of positive integers, got {text!r}")
    return values


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sparselab-tune",
        description="Tune SparseLab's kernel choice for this machine.",
        epilog="columns of the table (--show: op to prov; --wide: all):\n" + table.columns_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="log each key's tuning (time, choice, runner-up) to stderr"
    )
    src = p.add_argument_group("what to tune (default: the standard grid)")
    src.add_argument("--quick", action="store_true", help="a tiny grid (seconds; CI smoke test)")
    src.add_argument(
        "--model", metavar="JSON_SPEC", help="JSON file or inline JSON: a list of layers {out, in, n?, sparsity}"
    )
    src.add_argument(
        "--module", metavar="PKG.MOD:FACTORY", help="build a model with FACTORY() and tune its SparseLinear layers"
    )
    src.add_argument(
        "--block",
        metavar="RxC[,RxC...]",
        help="also tune the block-sparse ops (BlockSparseLinear) of every layer these block shapes tile",
    )
    src.add_argument(
        "--dtype",
        metavar="DTYPE[,DTYPE...]",
        help="activation dtypes to tune: float32, bfloat16 (a bfloat16 model's calls), or both "
        "(default: float32, and bfloat16 too for a --module model with bfloat16 layers)",
    )
    src.add_argument("--batch", metavar="N[,N...]", help="batch sizes for layers without n (default: grid batches)")
    src.add_argument("--threads", type=int, metavar="T", help="torch thread count to tune for")
    src.add_argument("--retune", action="store_true", help="re-tune keys already in the cache")
    act = p.add_argument_group("cache actions")
    act.add_argument("--show", action="store_true", help="print the tuning table, one concise row per key")
    act.add_argument("--wide", action="store_true", help="with --show (or after tuning): every column")
    act.add_argument(
        "--json", action="store_true", help="print the table (of --show, or of the keys just tuned) as JSON on stdout"
    )
    act.add_argument("--export", metavar="FILE", help="write the tuning table to FILE")
    act.add_argument("--import", dest="import_file", metavar="FILE", help="merge a table from FILE")
    act.add_argument("--force", action="store_true", help="with --import: accept a foreign CPU/build")
    act.add_argument("--clear", action="store_true", help="delete this machine's tuning table")
    act.add_argument(
        "--ship",
        metavar="DIR",
        help="write this machine's trusted entries as the shipped table of its CPU class into DIR "
        "(sparselab/data/system_wisdom in a checkout)",
    )
    return p


def _layers_and_batches(args, module_dtypes: set):
    layers = []
    if args.model:
        layers += grids.layers_from_spec(args.model)
    if args.module:
        layers += grids.layers_from_module(args.module, module_dtypes)
    if args.quick and not layers:
        layers, batches = grids.grid_layers(grids.QUICK_SHAPES, grids.QUICK_DENSITIES), grids.QUICK_BATCHES
    elif not layers:
        layers, batches = grids.grid_layers(grids.STANDARD_SHAPES, grids.STANDARD_DENSITIES), grids.STANDARD_BATCHES
    else:
        batches = grids.QUICK_BATCHES if args.quick else grids.STANDARD_BATCHES
    if args.batch:
        batches = _parse_ints(args.batch, "--batch")
    if args.block:
        blocks = grids.parse_blocks(args.block)
        with_blocks = grids.with_blocks(layers, blocks)
        if len(with_blocks) == len(layers):
            raise UserError(f"--block {args.block}: no layer's sides are whole blocks of these shapes")
        layers = with_blocks
    return layers, batches


def version() -> str:
    try:
        return importlib.metadata.version("sparselab")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _tune(args, cache) -> tuple[list[str], list[str]]:
    if settings.get_mode() == "off":
        raise UserError("SPARSELAB_TUNING=off disables tuning; unset it (or use 'force') to tune")
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be a positive integer, got {args.threads}")
        torch.set_num_threads(args.threads)
    module_dtypes = set()
    layers, batches = _layers_and_batches(args, module_dtypes)
    # Without --dtype: float32, and a --module model's bfloat16 layers' own keys.
    dtypes = grids.parse_dtypes(args.dtype) if args.dtype else sorted({"float32"} | module_dtypes, reverse=True)
    keys = grids.keys_for(layers, batches, torch.get_num_threads(), dtypes=dtypes)
    _warn_if_busy()
    retune = args.retune or settings.get_mode() == "force"
    done, failed, provisional = [], [], []
    for key, shape in tqdm(keys, desc="tuning", unit="key", file=sys.stderr, disable=args.json):
        old = cache.get(key)
        if not retune and old is not None and not old.get("provisional"):
            done.append(str(key))
            continue
        try:
            entry = tuner.tune(key, shape=shape)
            if entry.get("provisional"):  # timed under load: once more, keep the quieter timing
                again = tuner.tune(key, shape=shape)
                entry = min(entry, again, key=lambda e: e.get("interference") or 0.0)
        except Exception as e:  # one broken key must not lose the rest of the grid
            failed.append(f"{key}: {type(e).__name__}: {e}")
            continue
        if hook.store(cache, key, entry).get("provisional"):
            provisional.append(str(key))
        done.append(str(key))
    for line in failed:
        print(f"error: tuning failed for {line}", file=sys.stderr)
    if provisional:
        print(
            f"note: {len(provisional)} keys were timed while other work took the CPU; they are kept as "
            "provisional (used, marked in --show) and measured again at first use on a quiet machine, "
            "or by running sparselab-tune again",
            file=sys.stderr,
        )
    return done, failed


def _warn_if_busy() -> None:
    # Other processes steal the cores the kernels are timed on; say so before the first key.
    if not interference.quiet_now():
        print(
            "warning: other processes are running: keys timed while they take the CPU are kept "
            "as provisional and measured again later; tune on an idle machine for the best choices",
            file=sys.stderr,
        )


def _run(args) -> int:
    if args.force and not args.import_file:
        raise UserError("--force only applies to --import")
    tuning_asked = bool(
        args.quick or args.model or args.module or args.batch or args.block or args.dtype or args.threads or args.retune
    )
    other_action = bool(args.show or args.export or args.import_file or args.clear or args.ship)
    cache = wisdom.get_cache()
    # With --json, stdout holds only the JSON document; progress lines go to stderr.
    out = sys.stderr if args.json else sys.stdout

    if args.clear:
        removed = cache.clear()
        hook.reset()
        cache = wisdom.get_cache()
        print(f"cleared {cache.path}" if removed else f"nothing to clear at {cache.path}", file=out)
    if args.import_file:
        try:
            count = cache.import_(args.import_file, force=args.force)
        except ForeignFingerprintError as e:
            raise UserError(str(e)) from None
        except FileNotFoundError:
            raise UserError(f"no such file: {args.import_file}") from None
        except (OSError, ValueError) as e:
            raise UserError(f"cannot import {args.import_file}: {e}") from None
        hook.reset()
        cache = wisdom.get_cache()
        print(f"imported {count} entries into {cache.path}", file=out)
    tuned, failed = None, []
    if tuning_asked or not other_action:
        tuned, failed = _tune(args, cache)
    if args.export:
        try:
            count = cache.export(args.export)
        except OSError as e:
            raise UserError(f"cannot write {args.export}: {e}") from None
        print(f"exported {count} entries to {args.export}", file=out)
    if args.ship:
        try:
            path, count, left_out = ship.ship(cache, args.ship)
        except ValueError as e:
            raise UserError(str(e)) from None
        except OSError as e:
            raise UserError(f"cannot write into {args.ship}: {e}") from None
        note = f" ({left_out} provisional or skip-tuned entries left out)" if left_out else ""
        print(f"shipped {count} entries to {path}{note}", file=out)
    if args.show or tuned is not None:
        fp = cache.fingerprint
        only = None if args.show else set(tuned)
        rows = table.build(cache.entries(), only)
        if args.json:
            print(table.to_json(rows, fp, cache.path))
        else:
            print(f"# {fp.get('brand', '?')} | build {fp.get('build_hash', '?')} | {cache.path}")
            print(f"# {_shipped_line()}")
            print(table.render(rows, wide=args.wide))
    if failed:
        print(f"error: {len(failed)} of {len(failed) + len(tuned)} keys failed to tune", file=sys.stderr)
        return 1
    return 0


def _shipped_line() -> str:
    cls = system_wisdom.cpu_class()
    entries, path = system_wisdom.table()
    if path is not None:
        return f"shipped table for this CPU class: {len(entries)} keys ({path}); this machine's entries win"
    if not settings.system_wisdom():
        return "shipped tables are off (SPARSELAB_SYSTEM_WISDOM=off)"
    return f"no shipped table for this CPU class ({system_wisdom.class_id(cls)}) and build"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # argparse itself exits 2 with "error: ..." on bad flags
    # The CLI (not the library) decides where log records go: stderr, so --json stays clean.
    logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("sparselab").setLevel(logging.INFO if args.verbose else logging.WARNING)
    try:
        return _run(args)
    except (UserError, SpecError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; keys tuned so far are saved", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
