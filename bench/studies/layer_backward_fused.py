"""SparseLinear forward + backward (input needs a grad) as planned (the backward plan: a fused
kernel call or the two ops, tuned during the warm-up calls with tuning mode on and a throwaway
cache) against the two planned ops forced (the layer cache's ``backward`` declining, as it does
where the plan names the separate pair), and dense nn.Linear, side by side: interleaved rounds,
process CPU time, medians.

    python bench/studies/layer_backward_fused.py [ROUNDS] [THREADS]     # defaults: 5 rounds, 1 thread
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("SPARSELAB_CACHE_DIR", tempfile.mkdtemp(prefix="sparselab-bench-"))

import torch  # noqa: E402

from sparselab import SparseLinear  # noqa: E402
from sparselab.settings import mode as tuning_mode  # noqa: E402

N = 2048
SHAPES = [(640, 2560), (2560, 640), (4096, 4096)]  # (in, out)


def _decline(dy, x, bias_grad):
    return None  # what LayerCache.backward returns where the plan runs the separate pair


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", nargs="?", type=int, default=5)
    ap.add_argument("threads", nargs="?", type=int, default=1)
    a = ap.parse_args()
    rounds = a.rounds
    torch.set_num_threads(a.threads)
    for in_f, out_f in SHAPES:
        torch.manual_seed(0)
        layer = SparseLinear(in_f, out_f, sparsity=0.9)
        dense = torch.nn.Linear(in_f, out_f)
        x = torch.randn(N, in_f, requires_grad=True)
        g = torch.randn(N, out_f)

        def step(module):
            module.zero_grad(set_to_none=True)
            x.grad = None
            module(x).backward(g)

        def fused():
            # The layer's current cache (a settings change, such as entering tuning_mode below,
            # makes a new one): its own backward, which follows the backward plan.
            vars(layer.layer_cache()).pop("backward", None)
            step(layer)

        def separate():
            layer.layer_cache().backward = _decline
            step(layer)

        calls = {
            "sparse, planned backward": fused,
            "sparse, separate ops": separate,
            "dense nn.Linear": lambda: step(dense),
        }
        names = list(calls)
        t = {k: [] for k in names}
        with tuning_mode("on"):
            for f in (fused, separate, fused, separate):
                f()
            for r in range(rounds):
                for k in names[r % 3 :] + names[: r % 3]:
                    calls[k]()
                    t0 = time.process_time()
                    calls[k]()
                    t[k].append(time.process_time() - t0)
        vars(layer.layer_cache()).pop("backward", None)
        med = {k: statistics.median(v) for k, v in t.items()}
        print(
            f"SparseLinear({in_f}->{out_f}), N={N}, fwd+bwd, {torch.get_num_threads()} threads, CPU time, "
            f"medians of {rounds}"
        )
        for k in names:
            print(f"  {k:24s} {med[k] * 1e3:9.2f} ms  {med[k] / med['dense nn.Linear']:.3f}x dense")


if __name__ == "__main__":
    main()
