#include "parallel.h"

#include <pthread.h>
#if defined(SPARSELAB_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace sparselab {

#if !defined(SPARSELAB_OPENMP)
// The fallback pool, for builds without OpenMP (e.g. the NEON test binary).
namespace {

// A job is published by bumping `generation`; workers claim task indices from
// `next` until exhausted and report through `active`.
struct Pool {
  std::mutex mu;
  std::condition_variable wake;
  std::vector<std::thread> workers;
  std::atomic<uint64_t> generation{0};
  std::atomic<int64_t> next{0};
  std::atomic<int> active{0};
  int64_t ntasks = 0;
  int participants = 0;  // workers allowed to join the current job (excl. caller)
  TaskBody body = nullptr;
  void* ctx = nullptr;
  bool stop = false;

  void drain(int worker) {
    for (;;) {
      const int64_t t = next.fetch_add(1, std::memory_order_relaxed);
      if (t >= ntasks) break;
      body(ctx, t, worker);
    }
  }

  // `seen` is the generation current when the worker was created: a worker
  // created for a job must not mistake that job for one it already ran.
  void worker_loop(int id, uint64_t seen) {
    for (;;) {
      // Spin briefly: kernels are often called back to back.
      bool got = false;
      for (int spin = 0; spin < 2000; ++spin) {  // ~50 us, then sleep
        if (generation.load(std::memory_order_acquire) != seen) {
          got = true;
          break;
        }
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      }
      if (!got) {
        std::unique_lock<std::mutex> lk(mu);
        wake.wait(lk, [&] { return stop || generation.load() != seen; });
        if (stop) return;
      }
      seen = generation.load(std::memory_order_acquire);
      if (id <= participants) drain(id);
      active.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  void ensure_workers(int n) {
    while (static_cast<int>(workers.size()) < n) {
      const int id = static_cast<int>(workers.size()) + 1;
      const uint64_t gen = generation.load();
      workers.emplace_back([this, id, gen] { worker_loop(id, gen); });
    }
  }

  void run(int threads, int64_t n, TaskBody b, void* c) {
    std::lock_guard<std::mutex> job_lock(job_mu);  // one job at a time
    const int helpers = std::min<int64_t>(threads, n) - 1;
    ensure_workers(helpers);
    {
      std::lock_guard<std::mutex> lk(mu);
      ntasks = n;
      body = b;
      ctx = c;
      participants = helpers;
      next.store(0);
      active.store(static_cast<int>(workers.size()));
      generation.fetch_add(1, std::memory_order_release);
    }
    wake.notify_all();
    drain(0);
    while (active.load(std::memory_order_acquire) != 0) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  }

  std::mutex job_mu;
};

Pool* g_pool = nullptr;

// After fork() the child has no worker threads: start from a fresh pool and
// leak the old one (its mutexes may be held by threads that no longer exist).
void reset_after_fork() { g_pool = nullptr; }

Pool& pool() {
  static bool registered = [] {
    pthread_atfork(nullptr, nullptr, reset_after_fork);
    return true;
  }();
  (void)registered;
  if (!g_pool) g_pool = new Pool();  // intentionally never destroyed: workers are detached at exit
  return *g_pool;
}

}  // namespace
#endif

void parallel_tasks(int threads, int64_t ntasks, TaskBody body, void* ctx) {
  if (ntasks <= 0) return;
  if (threads <= 1 || ntasks == 1) {
    for (int64_t t = 0; t < ntasks; ++t) body(ctx, t, 0);
    return;
  }
#if defined(SPARSELAB_OPENMP)
  // torch's OpenMP team (one libgomp.so.1 per process: ours resolves to the copy torch
  // loaded): its threads are the ones spinning after every torch op, so reusing them
  // avoids a second pool fighting them for the cores (measured: a 40M GPT step at
  // 2 threads ran ~1.25x slower on a separate pool).
  const int team = static_cast<int>(std::min<int64_t>(threads, ntasks));
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(team)
  {
    const int worker = omp_get_thread_num();
    for (;;) {
      const int64_t t = next.fetch_add(1, std::memory_order_relaxed);
      if (t >= ntasks) break;
      body(ctx, t, worker);
    }
  }
#else
  pool().run(threads, ntasks, body, ctx);
#endif
}

}  // namespace sparselab
