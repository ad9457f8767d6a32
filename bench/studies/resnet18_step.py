"""A CIFAR-shape ResNet-18 training step, 90% sparse against dense, and each convolution's
forward + backward against dense torch and SparseProp's SparseConv2d, side by side in one process.

    python bench/studies/resnet18_step.py --threads 2 [--batch 128] [--rounds 7] [--json OUT]

The model is the CIFAR ResNet-18 of the DST papers (a 3x3 stem, four stages of two basic blocks,
64-512 channels, 1x1 projection shortcuts), input 32x32, batch 128. ``sparselab.sparsify`` makes
every convolution sparse at ``--sparsity`` (the 512->10 head stays dense, as by default). A step
is forward, backward and an SGD update. Per layer, every distinct convolution shape is timed
forward + backward (input and weight gradients) on the same magnitude-pruned weight: dense
``nn.Conv2d`` (oneDNN), ``sparselab.SparseConv2d`` and, when installed, SparseProp's
(``pip install --no-build-isolation sparseprop``; it reads OMP_NUM_THREADS, set here before import).
Timings interleave the contenders round by round and report medians; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from torch import nn


def block(cin: int, cout: int, stride: int) -> nn.Module:
    class Basic(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    return Basic()


def resnet18(classes: int = 10) -> nn.Module:
    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [block(cin, cout, stride), block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def interleaved(fns: dict, rounds: int) -> dict:
    """Median seconds of each function, called in rotated order round by round after a warm-up."""
    for f in fns.values():
        f()
    times = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def step_fn(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def conv_shapes(model: nn.Module, x: torch.Tensor) -> list[tuple]:
    """Every distinct (cin, cout, k, stride, padding, input size) of the model's convolutions."""
    seen, hooks = {}, []
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(
                m.register_forward_hook(
                    lambda mod, args, out: seen.setdefault(
                        (
                            mod.in_channels,
                            mod.out_channels,
                            mod.kernel_size[0],
                            mod.stride[0],
                            mod.padding[0],
                            args[0].shape[-1],
                        ),
                        None,
                    )
                )
            )
    with torch.no_grad():
        model(x[:2])
    for h in hooks:
        h.remove()
    return list(seen)


def layer_fns(shape, batch: int, sparsity: float, sparseprop) -> dict:
    import sparselab

    cin, cout, k, stride, pad, size = shape
    torch.manual_seed(0)
    dense = nn.Conv2d(cin, cout, k, stride, pad, bias=False)
    with torch.no_grad():
        w = dense.weight.reshape(cout, -1)
        keep = sparselab.storage.live_count(cout, w.shape[1], sparsity)
        mask = torch.zeros(w.numel(), dtype=torch.bool)
        mask[w.abs().reshape(-1).topk(keep).indices] = True
        dense.weight.mul_(mask.reshape(dense.weight.shape))
    ours = sparselab.SparseConv2d.from_dense(dense, None)
    x = torch.randn(batch, cin, size, size, requires_grad=True)
    fns = {}

    def fwd_bwd(module):
        def run():
            x.grad = None
            module.zero_grad(set_to_none=True)
            module(x).sum().backward()

        return run

    fns["dense"] = fwd_bwd(dense)
    fns["sparselab"] = fwd_bwd(ours)
    if sparseprop is not None:
        fns["sparseprop"] = fwd_bwd(sparseprop.SparseConv2d.from_dense(dense))
    return fns


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--sparsity", type=float, default=0.9)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--layer-rounds", type=int, default=9)
    p.add_argument("--no-layers", action="store_true", help="the training step only")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # SparseProp reads it at import
    torch.set_num_threads(args.threads)
    try:
        from sparseprop.modules import conv2d as sparseprop_conv  # optional: the peer, if installed
    except ImportError:
        sparseprop_conv = None
    import sparselab

    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    torch.manual_seed(0)
    dense = resnet18()
    sparse = sparselab.sparsify(resnet18(), args.sparsity, method="random", reinit=True)
    step = interleaved({"dense": step_fn(dense, x, y), "sparse": step_fn(sparse, x, y)}, args.rounds)
    result = {
        "threads": args.threads,
        "batch": args.batch,
        "sparsity": args.sparsity,
        "torch": torch.__version__,
        "step_s": step,
        "sparse_over_dense": step["sparse"] / step["dense"],
        "layers": [],
    }
    print(f"ResNet-18 (CIFAR), batch {args.batch}, {args.threads} threads, {args.sparsity:g} sparse convolutions")
    print(
        f"  step: dense {1e3 * step['dense']:.0f} ms, sparse {1e3 * step['sparse']:.0f} ms, ratio {result['sparse_over_dense']:.2f}"
    )
    if not args.no_layers:
        print(f"  {'cin':>4} {'cout':>4} {'k':>2} {'s':>2} {'HxW':>4} | fwd+bwd ms: dense, sparselab, sparseprop")
        for shape in conv_shapes(dense, x):
            t = interleaved(layer_fns(shape, args.batch, args.sparsity, sparseprop_conv), args.layer_rounds)
            result["layers"].append({"shape": shape, "seconds": t})
            cin, cout, k, stride, _, size = shape
            sp = f"{1e3 * t['sparseprop']:9.1f}" if "sparseprop" in t else "        -"
            print(
                f"  {cin:4d} {cout:4d} {k:2d} {stride:2d} {size:4d} | {1e3 * t['dense']:8.1f} {1e3 * t['sparselab']:9.1f} {sp}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
