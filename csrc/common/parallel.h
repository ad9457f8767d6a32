// One persistent worker pool for every kernel. Work is a list of independent
// tasks claimed dynamically; each output element belongs to exactly one task,
// so results never depend on the thread count.
#pragma once
#include <cstdint>

namespace sparselab {

using TaskBody = void (*)(void* ctx, int64_t task, int worker);

// Runs body(ctx, t, worker) for every t in [0, ntasks) on at most `threads`
// threads (the caller is worker 0). Returns when all tasks are done.
void parallel_tasks(int threads, int64_t ntasks, TaskBody body, void* ctx);

// Convenience for lambdas: parallel_for(threads, n, [&](int64_t t, int w) {...}).
template <typename F>
void parallel_for(int threads, int64_t ntasks, F&& f) {
  parallel_tasks(
      threads, ntasks, [](void* c, int64_t t, int w) { (*static_cast<F*>(c))(t, w); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace sparselab
