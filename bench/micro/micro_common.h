// What the kernel probes of bench/micro share: a seeded random W in padded-CSR form (no
// padding, int16 columns) and medians of interleaved timing rounds.
#pragma once
#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "format/padded_csr.h"

// A random out x in W with in/10 live slots per row (binomial row lengths with `ragged`),
// sorted random columns, values in [-0.5, 0.5).
struct RandomW {
  std::vector<int64_t> row_start{0};
  std::vector<int32_t> row_nnz;
  std::vector<int16_t> cols;
  std::vector<float> values;
  int64_t rows = 0, ncols = 0;

  RandomW(int64_t out, int64_t in, std::mt19937& rng, bool ragged = false) : rows(out), ncols(in) {
    std::vector<int> all(static_cast<size_t>(in));
    std::iota(all.begin(), all.end(), 0);
    std::binomial_distribution<int> live(int(in), 0.1);
    for (int64_t i = 0; i < out; ++i) {
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<int> c(all.begin(), all.begin() + (ragged ? live(rng) : int(in / 10)));
      std::sort(c.begin(), c.end());
      for (int j : c) cols.push_back(int16_t(j));
      row_nnz.push_back(int32_t(c.size()));
      row_start.push_back(int64_t(cols.size()));
    }
    values.resize(cols.size());
    for (auto& v : values) v = float(rng() % 100) / 100.0f - 0.5f;
  }
  int64_t nnz() const { return int64_t(cols.size()); }
  sparselab::CsrView<int16_t> view() const {
    return {values.data(), cols.data(), row_start.data(), row_nnz.data(), rows, ncols};
  }
};

using Configs = std::vector<std::pair<std::string, std::function<void()>>>;

// The median seconds per call of each config over `rounds` rounds, the configs interleaved in
// every round and each timed call right after an untimed one; CPU time (std::clock, meaningful
// with one thread: a shared machine inflates it least) when `cpu`, else wall time.
inline std::vector<double> interleaved_medians(const Configs& cfg, int rounds, bool cpu) {
  std::vector<std::vector<double>> t(cfg.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t c = 0; c < cfg.size(); ++c) {
      cfg[c].second();
      const std::clock_t c0 = std::clock();
      const auto w0 = std::chrono::steady_clock::now();
      cfg[c].second();
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      t[c].push_back(cpu ? double(std::clock() - c0) / CLOCKS_PER_SEC : wall);
    }
  std::vector<double> med;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}
