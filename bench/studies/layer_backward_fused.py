"""SparseLinear forward + backward (input needs a grad) as planned (the backward plan: a fused
kernel call or the two ops, tuned during the warm-up calls with tuning mode on and a throwaway
cache) against the two planned ops forced (the layer cache's ``backward`` patched to decline),
and dense nn.Linear, side by side: interleaved rounds, process CPU time, medians.

    python bench/studies/layer_backward_fused.py [ROUNDS] [THREADS]
"""

import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("SPARSELAB_CACHE_DIR", tempfile.mkdtemp(prefix="sparselab-bench-"))

import torch  # noqa: E402

from sparselab import SparseLinear  # noqa: E402
from sparselab.settings import mode as tuning_mode  # noqa: E402

N = 2048
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
for in_f, out_f in [(640, 2560), (2560, 640), (4096, 4096)]:
    torch.manual_seed(0)
    layer = SparseLinear(in_f, out_f, sparsity=0.9)
    dense = torch.nn.Linear(in_f, out_f)
    x = torch.randn(N, in_f, requires_grad=True)
    g = torch.randn(N, out_f)

    def step(module):
        module.zero_grad(set_to_none=True)
        x.grad = None
        module(x).backward(g)

    cache = layer.layer_cache()
    planned = cache.backward  # follows the backward plan (fused at this N without tuning)

    def fused():
        cache.backward = planned
        step(layer)

    def separate():
        cache.backward = lambda *a: None
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
    cache.backward = planned
    med = {k: statistics.median(v) for k, v in t.items()}
    print(
        f"SparseLinear({in_f}->{out_f}), N={N}, fwd+bwd, {torch.get_num_threads()} threads, CPU time, medians of {rounds}"
    )
    for k in names:
        print(f"  {k:24s} {med[k] * 1e3:9.2f} ms  {med[k] / med['dense nn.Linear']:.3f}x dense")
