"""One rank of the data-parallel tests (tests/model/test_distributed.py starts two of these).

    python ddp_worker.py RANK WORLD_SIZE STORE_PORT OUT_DIR

Joins a gloo group through the parent's TCPStore on 127.0.0.1, then per DST algorithm trains a
small SparseLinear MLP wrapped in DistributedDataParallel on rank-local batches and writes
losses, per-layer digests and update counts to OUT_DIR/rank<R>.json; rank 0 also saves a
checkpoint of the RigL run. Each rank seeds torch differently on purpose: attaching the
algorithm must bring every rank to rank 0's topology.
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import sparselab
from sparselab.model.distributed import broadcast_topology, topology_digest

STEPS, UPDATE_FREQ = 16, 4
IN, HIDDEN, OUT = 24, 64, 8


def make_model() -> nn.Module:
    return nn.Sequential(
        sparselab.SparseLinear(IN, HIDDEN, sparsity=0.8), nn.Tanh(), sparselab.SparseLinear(HIDDEN, OUT, sparsity=0.7)
    )


def batches(rank: int):
    """A fixed linear teacher (same on every rank); each rank draws its own inputs."""
    teacher = torch.randn(IN, OUT, generator=torch.Generator().manual_seed(123)) / IN**0.5
    g = torch.Generator().manual_seed(1000 + rank)
    for _ in range(STEPS):
        x = torch.randn(32, IN, generator=g)
        yield x, x @ teacher


def run(name: str, algo_cls, rank: int, out: Path, how: str = "attach", **kw) -> dict:
    torch.manual_seed(rank)  # ranks draw different topologies: attach must align them
    model = make_model()
    algo = algo_cls(0.75, update_freq=UPDATE_FREQ, drop_fraction=0.3, seed=rank, check_ranks=True, **kw)
    # Set up before DDP wraps the model (a resize after it would break its buckets); model.apply
    # leaves the model as attach does.
    if how == "apply":
        model.apply(algo)
    else:
        algo.attach(model)
    start = [topology_digest(m) for m in model.modules() if isinstance(m, sparselab.SparseLinear)]
    ddp = DDP(model)
    opt = algo.attach_optimizer(torch.optim.Adam(model.parameters(), lr=0.02))
    losses, changed = [], 0
    for x, y in batches(rank):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        changed += bool(algo.step())
        losses.append(loss.item())
    digests = [topology_digest(m, values=True) for m in model.modules() if isinstance(m, sparselab.SparseLinear)]
    if rank == 0 and name == "rigl":
        torch.save(
            {"model": model.state_dict(), "dst": algo.state_dict(), "optimizer": opt.state_dict()},
            out / "rigl_rank0.pt",
        )
    return {
        "losses": losses,
        "updates_changed": changed,
        "digests": digests,
        "topology_moved": start
        != [topology_digest(m) for m in model.modules() if isinstance(m, sparselab.SparseLinear)],
    }


def block_run(rank: int, dst: str | None = None) -> dict:
    """A BlockSparseLinear MLP under DDP: ranks draw different blocks; broadcast_topology (or, with
    ``dst``, attaching 'rigl' or 'topkast') gives them rank 0's, and training keeps them identical
    (Top-KAST's forward sets too)."""
    torch.manual_seed(rank)
    model = nn.Sequential(
        sparselab.nn.BlockSparseLinear(IN, HIDDEN, sparsity=0.75, block=(4, 1)),
        nn.Tanh(),
        sparselab.nn.BlockSparseLinear(HIDDEN, OUT, sparsity=0.5, block=(2, 2)),
    )
    algo = None
    if dst == "rigl":
        algo = sparselab.RigL(0.8, update_freq=UPDATE_FREQ, drop_fraction=0.3, seed=rank, check_ranks=True)
    elif dst == "topkast":
        algo = sparselab.TopKAST(
            0.8, backward_sparsity=0.6, update_freq=UPDATE_FREQ, drop_fraction=0.3, seed=rank, check_ranks=True
        )
    if algo is not None:
        algo.attach(model)
    else:
        broadcast_topology(model)
    ddp = DDP(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    if algo is not None:
        opt = algo.attach_optimizer(opt)
    losses, changed = [], 0
    for x, y in batches(rank):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        if algo is not None:
            changed += bool(algo.step())
        losses.append(loss.item())
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    for m in model:
        if getattr(m, "forward_subset", None) is not None:
            h.update(m.forward_subset.slots.numpy().tobytes())
    return {"losses": losses, "digest": h.hexdigest(), "updates_changed": changed}


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=30))
    result = {
        name: run(name, cls, rank, out)
        for name, cls in (("rigl", sparselab.RigL), ("set", sparselab.SET), ("snfs", sparselab.SNFS))
    }
    result["rigl_group"] = run("rigl_group", sparselab.RigL, rank, out, process_group=dist.new_group([0, 1]))
    result["rigl_apply"] = run("rigl_apply", sparselab.RigL, rank, out, how="apply")
    # A model with no DST algorithm wraps too (its buffers are listed by the registration hook).
    torch.manual_seed(0)
    plain = DDP(make_model())
    plain(torch.randn(4, IN)).sum().backward()
    result["plain_grad_ok"] = all(p.grad is not None for p in plain.parameters())
    result["block"] = block_run(rank)
    result["block_rigl"] = block_run(rank, dst="rigl")
    result["block_topkast"] = block_run(rank, dst="topkast")
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
