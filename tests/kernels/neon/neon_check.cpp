// Correctness check of the aarch64 kernel variants, built as one static binary
// and run under qemu-aarch64-static (see run.sh).
//
// Every variant of the registry of an aarch64 build (the NEON lines of
// csrc/variants.def plus the portable scalar ones) is run on deterministic
// pseudo-random padded-CSR cases and compared with the scalar reference
// (csrc/kernels/scalar_reference.h) computed in double:
//   spmm_fwd  Y = X W^T + b
//   spmm_dx   dX = dY W   (SL_DX_T: a forward kernel on W's transposed index,
//                          built here like csrc/ops/run_ops.cpp does; SL_DX_S: scatter)
//   sddmm_dw  dW[k] = sum_b dY[b, i] X[b, cols[k]] at live slots, 0 at padding
// and every form (plain, unrolled, lanes, tiled, blocked, block-major, scatter) must
// have a NEON variant.
// Tolerance per output: 2 (len + 2) u sum|terms| with u = 2^-24 and len the
// dot length (the classic bound for a length-len float dot).
// Also checked: padding values are NaN and padding columns of every leading
// dimension are NaN (never read), output padding columns stay untouched,
// padding slots of dW are exactly 0, scratch is used only up to the size the
// variant asked for, threads=2 gives bit-identical results to threads=1, and
// every input/output array ends at a PROT_NONE page so a read or write past
// its end crashes (the crash handler names the check that was running).
//
// Prints one line per failed check and ends with "N passed, N failed".
// Usage: neon_check [-v]   (-v: one line per check)
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../../../csrc/common/bf16.h"
#include "../../../csrc/common/parallel.h"
#include "../../../csrc/kernels/kernel_api.h"
#include "../../../csrc/kernels/scalar_reference.h"

#include "../../../csrc/registry.h"

using namespace sparselab;

namespace {

// ---- the registry (csrc/registry.cpp over the tables of instantiate_scalar.cpp
// and instantiate_neon.cpp, expanded from csrc/variants.def) ----

enum class Kind { Fwd, DxT, DxS, Dw };

struct NcVariant {
  Kind kind;
  const sparselab::Variant* v;
  bool bf16;  // reads and writes bfloat16 activations (kernel_api.h)
  const char* op;
  const char* name;
  const char* isa;
  FwdFn<int16_t> fwd16;
  FwdFn<int32_t> fwd32;
  DxFn<int16_t> dx16;
  DxFn<int32_t> dx32;
  DwFn<int16_t> dw16;
  DwFn<int32_t> dw32;
  ScratchFn scratch;
};

const std::vector<NcVariant>& registry() {
  static const std::vector<NcVariant> table = [] {
    std::vector<NcVariant> t;
    for (const sparselab::Variant& v : variants()) {
      // Block-sparse variants take a block grid, not a PaddedCSR: check_block_variants runs them.
      if (v.op != Op::SpmmFwd && v.op != Op::SpmmDx && v.op != Op::SddmmDw) continue;
      // bfloat16 lines read bfloat16 activations: check_bf16_case runs them against their twins.
      const bool bf16 = v.dtype == "bfloat16";
      const Kind kind = v.op == Op::SpmmFwd                   ? Kind::Fwd
                        : v.op == Op::SddmmDw                 ? Kind::Dw
                        : v.dx_layout == DxLayout::Transposed ? Kind::DxT
                                                              : Kind::DxS;
      t.push_back(NcVariant{kind, &v, bf16, op_name(v.op), v.name.c_str(), v.isa.c_str(), v.fwd16, v.fwd32, v.dx16,
                            v.dx32, v.dw16, v.dw32, v.scratch});
    }
    return t;
  }();
  return table;
}

// ---- crash reporting ----

char g_current[512] = "startup";

void on_crash(int sig) {
  char buf[700];
  const int len = snprintf(buf, sizeof buf, "CRASH signal %d during: %s\n", sig, g_current);
  if (len > 0) (void)!write(2, buf, size_t(len));
  (void)!write(1, buf, size_t(len > 0 ? len : 0));
  _exit(3);
}

// ---- deterministic randomness ----

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  int64_t range(int64_t lo, int64_t hi) { return lo + int64_t(next() % uint64_t(hi - lo + 1)); }
  bool chance(double p) { return uniform() < p; }
  float value() {  // uniform in [-1, 1), exactly representable
    return float(int32_t(next() >> 40) - (1 << 23)) / float(1 << 23);
  }
};

// ---- arrays that end at an inaccessible page ----

template <typename T>
class Guarded {
 public:
  Guarded() = default;
  explicit Guarded(size_t count) : count_(count) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t bytes = count * sizeof(T);
    const size_t data_pages = (bytes + page - 1) / page;
    len_ = (data_pages + 1) * page;
    void* base = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      perror("mmap");
      std::exit(4);
    }
    base_ = static_cast<char*>(base);
    if (mprotect(base_ + data_pages * page, page, PROT_NONE) != 0) {
      perror("mprotect");
      std::exit(4);
    }
    p_ = reinterpret_cast<T*>(base_ + data_pages * page - bytes);
  }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  Guarded(Guarded&& o) noexcept { *this = std::move(o); }
  Guarded& operator=(Guarded&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(len_, o.len_);
    std::swap(p_, o.p_);
    std::swap(count_, o.count_);
    return *this;
  }
  ~Guarded() {
    if (base_) munmap(base_, len_);
  }
  T* data() const { return p_; }
  size_t size() const { return count_; }
  T& operator[](size_t i) const { return p_[i]; }

 private:
  char* base_ = nullptr;
  size_t len_ = 0;
  T* p_ = nullptr;
  size_t count_ = 0;
};

const float kNaN = std::nanf("");
const uint32_t kOutSentinel = 0x7fc0beefu;  // a NaN payload kernels never produce
const uint32_t kScratchSlack = 0x7fc0deadu;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- cases ----

struct CaseSpec {
  std::string label;
  int64_t out, in, n;
  double sparsity;
  int idx_bits;            // 16 or 32
  int ld_extra;            // max extra columns on each leading dimension (NaN-filled)
  int slack;               // max padding slots per row
  double p_empty, p_full;  // chance a row is forced empty / full
  int chunk_mode;          // 0 one chunk, 1 one row per chunk, 2 random cuts
  bool bias;
  uint64_t seed;
};

int g_passed = 0, g_failed = 0;
bool g_verbose = false;

void record(bool ok, const std::string& what, const std::string& detail) {
  if (ok) {
    ++g_passed;
    if (g_verbose) printf("ok   %s\n", what.c_str());
  } else {
    ++g_failed;
    printf("FAIL %s: %s\n", what.c_str(), detail.c_str());
  }
  fflush(stdout);
}

std::vector<int64_t> make_chunks(int64_t rows, int mode, Rng& rng) {
  std::vector<int64_t> c{0};
  for (int64_t i = 1; i < rows; ++i) {
    if (mode == 1 || (mode == 2 && rng.chance(0.3))) c.push_back(i);
  }
  c.push_back(rows);
  return c;
}

// Outputs, compared element by element. `len` is the dot length of each.
struct Expect {
  std::vector<double> ref, mag;
  std::vector<int64_t> len;
};

template <typename Idx>
struct Problem {
  CaseSpec spec;
  int64_t out = 0, in = 0, n = 0, cap = 0, nnz = 0;
  int64_t ldx = 0, lddy = 0, ldy = 0, lddx = 0;
  // W, padded
  Guarded<float> wv;
  Guarded<Idx> wc;
  Guarded<int64_t> rs;
  Guarded<int32_t> rn;
  // W^T, compact, values gathered (what run_ops hands a SL_DX_T kernel)
  Guarded<float> tv;
  Guarded<Idx> tc;
  Guarded<int64_t> trs;
  Guarded<int32_t> trn;
  Guarded<float> x, dy, bias;
  std::vector<int64_t> chunks_w, chunks_t;
  Expect y_exp, dx_exp, dw_exp;

  CsrView<Idx> w_view() const { return {wv.data(), wc.data(), rs.data(), rn.data(), out, in}; }
  CsrView<Idx> t_view() const { return {tv.data(), tc.data(), trs.data(), trn.data(), in, out}; }
};

template <typename Idx>
Problem<Idx> build(const CaseSpec& s) {
  Problem<Idx> p;
  p.spec = s;
  p.out = s.out;
  p.in = s.in;
  p.n = s.n;
  Rng rng(s.seed);
  auto extra = [&] { return s.ld_extra > 0 && rng.chance(0.6) ? rng.range(1, s.ld_extra) : 0; };
  p.ldx = s.in + extra();
  p.lddy = s.out + extra();
  p.ldy = s.out + extra();
  p.lddx = s.in + extra();

  // Topology: sorted live columns per row, then random padding slack.
  std::vector<std::vector<int64_t>> rows(size_t(s.out));
  std::vector<int64_t> caps(size_t(s.out));
  for (int64_t i = 0; i < s.out; ++i) {
    auto& r = rows[size_t(i)];
    if (rng.chance(s.p_empty)) {
    } else if (rng.chance(s.p_full)) {
      for (int64_t j = 0; j < s.in; ++j) r.push_back(j);
    } else {
      for (int64_t j = 0; j < s.in; ++j)
        if (!rng.chance(s.sparsity)) r.push_back(j);
    }
    caps[size_t(i)] = int64_t(r.size()) + (s.slack ? rng.range(0, s.slack) : 0);
    p.cap += caps[size_t(i)];
    p.nnz += int64_t(r.size());
  }
  p.wv = Guarded<float>(size_t(p.cap));
  p.wc = Guarded<Idx>(size_t(p.cap));
  p.rs = Guarded<int64_t>(size_t(s.out + 1));
  p.rn = Guarded<int32_t>(size_t(s.out));
  int64_t pos = 0;
  for (int64_t i = 0; i < s.out; ++i) {
    p.rs[size_t(i)] = pos;
    const auto& r = rows[size_t(i)];
    p.rn[size_t(i)] = int32_t(r.size());
    for (int64_t k = 0; k < caps[size_t(i)]; ++k) {
      const bool live = k < int64_t(r.size());
      p.wc[size_t(pos + k)] = live ? Idx(r[size_t(k)]) : kPadding<Idx>;
      p.wv[size_t(pos + k)] = live ? rng.value() : kNaN;  // garbage in padding
    }
    pos += caps[size_t(i)];
  }
  p.rs[size_t(s.out)] = pos;

  // W^T by counting sort over columns (rows visited in order: sorted).
  p.trs = Guarded<int64_t>(size_t(s.in + 1));
  p.trn = Guarded<int32_t>(size_t(s.in));
  p.tv = Guarded<float>(size_t(p.nnz));
  p.tc = Guarded<Idx>(size_t(p.nnz));
  std::vector<int64_t> fill(size_t(s.in + 1), 0);
  for (int64_t i = 0; i < s.out; ++i)
    for (int64_t c : rows[size_t(i)]) fill[size_t(c + 1)]++;
  for (int64_t j = 0; j < s.in; ++j) {
    p.trn[size_t(j)] = int32_t(fill[size_t(j + 1)]);
    fill[size_t(j + 1)] += fill[size_t(j)];
  }
  for (int64_t j = 0; j <= s.in; ++j) p.trs[size_t(j)] = fill[size_t(j)];
  for (int64_t i = 0; i < s.out; ++i)
    for (int32_t k = 0; k < p.rn[size_t(i)]; ++k) {
      const int64_t src = p.rs[size_t(i)] + k;
      const int64_t dst = fill[size_t(p.wc[size_t(src)])]++;
      p.tc[size_t(dst)] = Idx(i);
      p.tv[size_t(dst)] = p.wv[size_t(src)];
    }

  // Dense operands, NaN in every leading-dimension padding column.
  auto dense = [&](int64_t cols, int64_t ld) {
    Guarded<float> g(size_t(s.n * ld));
    for (int64_t b = 0; b < s.n; ++b)
      for (int64_t j = 0; j < ld; ++j) g[size_t(b * ld + j)] = j < cols ? rng.value() : kNaN;
    return g;
  };
  p.x = dense(s.in, p.ldx);
  p.dy = dense(s.out, p.lddy);
  if (s.bias) {
    p.bias = Guarded<float>(size_t(s.out));
    for (int64_t i = 0; i < s.out; ++i) p.bias[size_t(i)] = rng.value();
  }
  p.chunks_w = make_chunks(s.out, s.chunk_mode, rng);
  p.chunks_t = make_chunks(s.in, s.chunk_mode, rng);

  // References in double, from the scalar reference code: values and |values|.
  for (int pass = 0; pass < 2; ++pass) {
    auto cvt = [&](const float* f, size_t cnt) {
      std::vector<double> d(cnt);
      for (size_t k = 0; k < cnt; ++k) d[k] = pass ? std::fabs(double(f[k])) : double(f[k]);
      return d;
    };
    const auto wvd = cvt(p.wv.data(), p.wv.size());
    const auto xd = cvt(p.x.data(), p.x.size());
    const auto dyd = cvt(p.dy.data(), p.dy.size());
    const auto bd = cvt(p.bias.data(), p.bias.size());
    const CsrView<Idx, double> wd{wvd.data(), p.wc.data(), p.rs.data(), p.rn.data(), s.out, s.in};
    const int64_t one_chunk[2] = {0, s.out};

    std::vector<double> y(size_t(s.n * s.out)), dx(size_t(s.n * s.in)), dw(size_t(p.cap));
    scalar::fwd<Idx, double>(wd, s.n, xd.data(), p.ldx, s.bias ? bd.data() : nullptr, y.data(), s.out, one_chunk, 1, 1);
    scalar::dx_scatter<Idx, double>(wd, s.n, dyd.data(), p.lddy, dx.data(), s.in, 1);
    scalar::dw<Idx, double>(wd, s.n, dyd.data(), p.lddy, xd.data(), p.ldx, dw.data(), one_chunk, 1, 1);
    (pass ? p.y_exp.mag : p.y_exp.ref) = std::move(y);
    (pass ? p.dx_exp.mag : p.dx_exp.ref) = std::move(dx);
    (pass ? p.dw_exp.mag : p.dw_exp.ref) = std::move(dw);
  }
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t i = 0; i < s.out; ++i) p.y_exp.len.push_back(p.rn[size_t(i)] + 1);
    for (int64_t j = 0; j < s.in; ++j) p.dx_exp.len.push_back(p.trn[size_t(j)]);
  }
  p.dw_exp.len.assign(size_t(p.cap), s.n);
  return p;
}

// Compares a [rows, cols] result with leading dimension ld; columns [cols, ld)
// must still hold the sentinel. Returns "" or a description of what is wrong.
std::string compare(const float* got, int64_t rows, int64_t cols, int64_t ld, const Expect& e) {
  const double u = std::ldexp(1.0, -24);
  int64_t bad = 0;
  std::string first;
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t j = 0; j < ld; ++j) {
      const float g = got[b * ld + j];
      char msg[256] = "";
      if (j >= cols) {
        if (bits(g) != kOutSentinel)
          snprintf(msg, sizeof msg, "[%lld,%lld] is output padding (ld %lld) but was written: %g", (long long)b,
                   (long long)j, (long long)ld, double(g));
      } else {
        const size_t k = size_t(b * cols + j);
        const double tol = 2.0 * double(e.len[k] + 2) * u * e.mag[k];
        const double err = std::fabs(double(g) - e.ref[k]);
        if (!(err <= tol))
          snprintf(msg, sizeof msg, "[%lld,%lld] got %.9g want %.9g (err %.3g > tol %.3g, len %lld)", (long long)b,
                   (long long)j, double(g), e.ref[k], err, tol, (long long)e.len[k]);
      }
      if (msg[0]) {
        if (bad++ == 0) first = msg;
      }
    }
  if (!bad) return "";
  if (bad > 1) first += " (+" + std::to_string(bad - 1) + " more)";
  return first;
}

template <typename Idx>
std::string compare_dw(const float* got, const Problem<Idx>& p) {
  const double u = std::ldexp(1.0, -24);
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < p.out; ++i)
    for (int64_t k = p.rs[size_t(i)]; k < p.rs[size_t(i + 1)]; ++k) {
      const bool live = k - p.rs[size_t(i)] < p.rn[size_t(i)];
      const float g = got[k];
      char msg[256] = "";
      if (!live) {
        if (bits(g) != 0u)
          snprintf(msg, sizeof msg, "row %lld padding slot %lld is %g, want +0", (long long)i, (long long)k, double(g));
      } else {
        const double tol = 2.0 * double(p.n + 2) * u * p.dw_exp.mag[size_t(k)];
        const double err = std::fabs(double(g) - p.dw_exp.ref[size_t(k)]);
        if (!(err <= tol))
          snprintf(msg, sizeof msg, "row %lld slot %lld got %.9g want %.9g (err %.3g > tol %.3g)", (long long)i,
                   (long long)k, double(g), p.dw_exp.ref[size_t(k)], err, tol);
      }
      if (msg[0] && bad++ == 0) first = msg;
    }
  if (!bad) return "";
  if (bad > 1) first += " (+" + std::to_string(bad - 1) + " more)";
  return first;
}

// Scratch as the caller hands it out: 64-byte aligned, NaN-filled, with a
// sentinel-filled slack up to the next 16 floats and a guard page after.
struct Scratch {
  Guarded<float> buf;
  size_t need = 0;
  explicit Scratch(size_t floats) : buf((floats + 15) / 16 * 16), need(floats) {
    for (size_t k = 0; k < buf.size(); ++k) buf[k] = k < need ? kNaN : from_bits(kScratchSlack);
  }
  float* ptr() const { return need ? buf.data() : nullptr; }
  bool intact() const {
    for (size_t k = need; k < buf.size(); ++k)
      if (bits(buf[k]) != kScratchSlack) return false;
    return true;
  }
};

template <typename Idx>
FwdFn<Idx> fwd_fn(const NcVariant& v);
template <>
FwdFn<int16_t> fwd_fn<int16_t>(const NcVariant& v) {
  return v.fwd16;
}
template <>
FwdFn<int32_t> fwd_fn<int32_t>(const NcVariant& v) {
  return v.fwd32;
}
template <typename Idx>
DxFn<Idx> dx_fn(const NcVariant& v);
template <>
DxFn<int16_t> dx_fn<int16_t>(const NcVariant& v) {
  return v.dx16;
}
template <>
DxFn<int32_t> dx_fn<int32_t>(const NcVariant& v) {
  return v.dx32;
}
template <typename Idx>
DwFn<Idx> dw_fn(const NcVariant& v);
template <>
DwFn<int16_t> dw_fn<int16_t>(const NcVariant& v) {
  return v.dw16;
}
template <>
DwFn<int32_t> dw_fn<int32_t>(const NcVariant& v) {
  return v.dw32;
}

// Runs one variant with `threads` threads; returns its output (copied) and
// an error string for anything wrong besides the numbers.
// A bfloat16 output slot no kernel writes (kernels write NaN as 0x7FC0).
const uint16_t kOutSentinelBf16 = 0x7fa1u;

// A bfloat16 line's activation-shaped output, widened, with untouched slots as kOutSentinel.
std::vector<float> widened(const Guarded<Bf16>& g) {
  std::vector<float> out(g.size());
  for (size_t k = 0; k < g.size(); ++k)
    out[k] = g[k].bits == kOutSentinelBf16 ? from_bits(kOutSentinel) : bf16_to_float(g[k]);
  return out;
}

// `xb`, `dyb`: a bfloat16 line's operands (p.x and p.dy hold the same values widened); its
// activation-shaped outputs come back widened.
template <typename Idx>
std::vector<float> run_variant(const NcVariant& v, const Problem<Idx>& p, int threads, std::string& err,
                               const Bf16* xb = nullptr, const Bf16* dyb = nullptr) {
  const int64_t n = p.n;
  std::vector<float> result;
  auto sentinel_buf = [](size_t cnt) {
    Guarded<float> g(cnt);
    for (size_t k = 0; k < cnt; ++k) g[k] = from_bits(kOutSentinel);
    return g;
  };
  // The operand and output pointers a bfloat16 line reads as Bf16 (kernel_api.h).
  const float* x = v.bf16 ? reinterpret_cast<const float*>(xb) : p.x.data();
  const float* dy = v.bf16 ? reinterpret_cast<const float*>(dyb) : p.dy.data();
  Guarded<Bf16> out16(v.bf16 && v.kind != Kind::Dw ? size_t(n * (v.kind == Kind::Fwd ? p.ldy : p.lddx)) : 0);
  for (size_t k = 0; k < out16.size(); ++k) out16[k] = Bf16{kOutSentinelBf16};
  auto out_ptr = [&](Guarded<float>& g) { return v.bf16 ? reinterpret_cast<float*>(out16.data()) : g.data(); };
  auto take = [&](const Guarded<float>& g) {
    result = v.bf16 ? widened(out16) : std::vector<float>(g.data(), g.data() + g.size());
  };
  switch (v.kind) {
    case Kind::Fwd: {
      Guarded<float> y = sentinel_buf(size_t(n * p.ldy));
      Scratch sc(v.scratch(n, p.in, p.out, p.nnz, threads));
      FwdArgs<Idx> a{p.w_view(),
                     n,
                     x,
                     p.ldx,
                     p.spec.bias ? p.bias.data() : nullptr,
                     out_ptr(y),
                     p.ldy,
                     p.chunks_w.data(),
                     int64_t(p.chunks_w.size()) - 1,
                     sc.ptr(),
                     threads};
      fwd_fn<Idx>(v)(a);
      if (!sc.intact()) err = "wrote past the scratch size it asked for";
      take(y);
      break;
    }
    case Kind::DxT: {  // forward kernel on W^T: dX = dY (W^T)^T
      Guarded<float> dx = sentinel_buf(size_t(n * p.lddx));
      Scratch sc(v.scratch(n, p.out, p.in, p.nnz, threads));
      FwdArgs<Idx> a{p.t_view(),
                     n,
                     dy,
                     p.lddy,
                     nullptr,
                     out_ptr(dx),
                     p.lddx,
                     p.chunks_t.data(),
                     int64_t(p.chunks_t.size()) - 1,
                     sc.ptr(),
                     threads};
      fwd_fn<Idx>(v)(a);
      if (!sc.intact()) err = "wrote past the scratch size it asked for";
      take(dx);
      break;
    }
    case Kind::DxS: {
      Guarded<float> dx = sentinel_buf(size_t(n * p.lddx));
      Scratch sc(v.scratch(n, p.in, p.out, p.nnz, threads));
      DxArgs<Idx> a{
          p.w_view(), n,      dy, p.lddy, out_ptr(dx), p.lddx, p.chunks_w.data(), int64_t(p.chunks_w.size()) - 1,
          sc.ptr(),   threads};
      dx_fn<Idx>(v)(a);
      if (!sc.intact()) err = "wrote past the scratch size it asked for";
      take(dx);
      break;
    }
    case Kind::Dw: {
      Guarded<float> dw(size_t(p.cap));
      for (size_t k = 0; k < dw.size(); ++k) dw[k] = kNaN;  // must all be overwritten
      Scratch sc(v.scratch(n, p.in, p.out, p.nnz, threads));
      DwArgs<Idx> a{
          p.w_view(), n,      dy, p.lddy, x, p.ldx, dw.data(), p.chunks_w.data(), int64_t(p.chunks_w.size()) - 1,
          sc.ptr(),   threads};
      dw_fn<Idx>(v)(a);
      if (!sc.intact()) err = "wrote past the scratch size it asked for";
      result.assign(dw.data(), dw.data() + dw.size());
      break;
    }
  }
  return result;
}

template <typename Idx>
void check_case(const CaseSpec& s) {
  const Problem<Idx> p = build<Idx>(s);
  char desc[300];
  snprintf(desc, sizeof desc,
           "case '%s' (out=%lld in=%lld N=%lld nnz=%lld cap=%lld idx%d ldx=%lld "
           "lddy=%lld ldy=%lld lddx=%lld chunks=%zu%s)",
           s.label.c_str(), (long long)p.out, (long long)p.in, (long long)p.n, (long long)p.nnz, (long long)p.cap,
           int(sizeof(Idx) * 8), (long long)p.ldx, (long long)p.lddy, (long long)p.ldy, (long long)p.lddx,
           p.chunks_w.size() - 1, s.bias ? " bias" : "");
  for (const NcVariant& v : registry()) {
    if (v.bf16) continue;  // check_bf16_case
    std::vector<float> first;
    for (int threads : {1, 2}) {
      const std::string what = std::string(v.op) + " " + v.name + " threads=" + std::to_string(threads) + " " + desc;
      snprintf(g_current, sizeof g_current, "%s", what.c_str());
      std::string err;
      const std::vector<float> got = run_variant(v, p, threads, err);
      if (err.empty()) {
        switch (v.kind) {
          case Kind::Fwd:
            err = compare(got.data(), p.n, p.out, p.ldy, p.y_exp);
            break;
          case Kind::DxT:
          case Kind::DxS:
            err = compare(got.data(), p.n, p.in, p.lddx, p.dx_exp);
            break;
          case Kind::Dw:
            err = compare_dw(got.data(), p);
            break;
        }
      }
      if (err.empty() && threads > 1 &&
          (got.size() != first.size() || std::memcmp(got.data(), first.data(), got.size() * sizeof(float)) != 0))
        err = "result differs bitwise from threads=1";
      if (threads == 1) first = got;
      record(err.empty(), what, err);
    }
  }
}

// ---- bfloat16 lines: bitwise their float32 twin's result on the widened operands, rounded ----

// The float32 line of the same op, ISA, form (without "_bf16") and tiles: registry.bf16_twin's
// rule on a CPU without streamed forms (NEON has none). Unstructured and block lines alike.
const sparselab::Variant* float32_twin(const sparselab::Variant& u) {
  const std::string& f = u.form;
  const std::string form = f.size() > 5 ? f.substr(0, f.size() - 5) : f;
  for (const sparselab::Variant& v : variants())
    if (v.dtype != "bfloat16" && v.op == u.op && v.isa == u.isa && v.form == form && v.params == u.params) return &v;
  return nullptr;
}

const NcVariant* twin_of(const NcVariant& u) {
  const sparselab::Variant* t = float32_twin(*u.v);
  for (const NcVariant& v : registry())
    if (v.v == t) return &v;
  return nullptr;
}

template <typename Idx>
void check_bf16_case(const CaseSpec& s) {
  Problem<Idx> p = build<Idx>(s);
  // bfloat16 operands; the float problem then holds exactly their values.
  Guarded<Bf16> xb(p.x.size()), dyb(p.dy.size());
  for (size_t k = 0; k < p.x.size(); ++k) p.x[k] = bf16_to_float(xb[k] = float_to_bf16(p.x[k]));
  for (size_t k = 0; k < p.dy.size(); ++k) p.dy[k] = bf16_to_float(dyb[k] = float_to_bf16(p.dy[k]));
  for (const NcVariant& u : registry()) {
    if (!u.bf16) continue;
    const NcVariant* t = twin_of(u);
    for (int threads : {1, 2}) {
      const std::string what = std::string(u.op) + " " + u.name + " threads=" + std::to_string(threads) + " case '" +
                               s.label + "' idx" + std::to_string(s.idx_bits);
      snprintf(g_current, sizeof g_current, "%s", what.c_str());
      if (!t) {
        record(false, what, "no float32 twin in the registry");
        break;
      }
      std::string err;
      const std::vector<float> want = run_variant(*t, p, threads, err);
      const std::vector<float> got = run_variant(u, p, threads, err, xb.data(), dyb.data());
      for (size_t k = 0; err.empty() && k < got.size(); ++k) {
        // dW is float32; activation outputs are the twin's rounded once (its untouched slots too).
        const bool untouched = bits(want[k]) == kOutSentinel;
        const float w = u.kind == Kind::Dw || untouched ? want[k] : bf16_to_float(float_to_bf16(want[k]));
        if (bits(got[k]) != bits(w))
          err = "element " + std::to_string(k) + ": got " + std::to_string(got[k]) + ", the twin rounded " +
                std::to_string(w);
      }
      record(err.empty(), what + " against " + t->name, err);
    }
  }
}

void check(const CaseSpec& s) {
  if (s.idx_bits == 16) {
    check_case<int16_t>(s);
    check_bf16_case<int16_t>(s);
  } else {
    check_case<int32_t>(s);
    check_bf16_case<int32_t>(s);
  }
}

std::vector<CaseSpec> cases() {
  std::vector<CaseSpec> c;
  uint64_t seed = 1;
  // label, out, in, n, sparsity, idx, ld_extra, slack, p_empty, p_full, chunk_mode, bias
  auto add = [&](std::string label, int64_t out, int64_t in, int64_t n, double sp, int idx, int ld_extra, int slack,
                 double pe, double pf, int chunk_mode, bool bias) {
    c.push_back(CaseSpec{std::move(label), out, in, n, sp, idx, ld_extra, slack, pe, pf, chunk_mode, bias, seed++});
  };
  // Corners, each with both index widths.
  for (int idx : {16, 32}) {
    add("1x1 dense N=1", 1, 1, 1, 0.0, idx, 0, 0, 0, 0, 0, false);
    add("1x1 dense N=1 padded", 1, 1, 1, 0.0, idx, 3, 3, 0, 0, 0, true);
    add("out=1", 1, 37, 5, 0.3, idx, 2, 2, 0, 0, 0, true);
    add("in=1", 29, 1, 6, 0.0, idx, 2, 1, 0, 0, 2, true);
    add("in=1 half", 29, 1, 7, 0.5, idx, 2, 1, 0, 0, 1, false);
    add("N=0", 6, 9, 0, 0.5, idx, 1, 2, 0, 0, 2, true);
    for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17})
      add("full rows N=" + std::to_string(n), 7, 23, n, 0.0, idx, n % 3, n % 2 ? 3 : 0, 0, 0, int(n % 3), n % 2 == 0);
    add("sparsity 0.999", 50, 400, 9, 0.999, idx, 3, 2, 0, 0, 2, true);
    add("all rows empty", 12, 20, 5, 1.0, idx, 2, 3, 0, 0, 2, true);
    add("empty + full rows", 24, 19, 11, 0.7, idx, 3, 2, 0.3, 0.3, 2, true);
    add("long rows", 5, 300, 6, 0.0, idx, 4, 3, 0, 0, 1, true);
    add("ldx > in", 16, 21, 10, 0.4, idx, 9, 2, 0.1, 0.1, 2, false);
    for (int64_t n : {255, 256, 257, 513, 600})
      add("batch blocks N=" + std::to_string(n), 9, 13, n, 0.5, idx, 2, 2, 0.1, 0.1, 2, true);
  }
  add("int16 max columns", 2, 32767, 3, 0.995, 16, 2, 2, 0, 0, 0, true);
  add("int32 wide", 3, 40000, 5, 0.99, 32, 2, 2, 0, 0, 0, true);
  add("int32 tall", 40000, 3, 2, 0.7, 32, 1, 1, 0.05, 0.05, 2, true);
  // Random small cases.
  Rng r(20240601);
  const double sps[] = {0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999};
  for (int t = 0; t < 300; ++t) {
    const int64_t out = r.range(1, 48), in = r.range(1, 48), n = r.range(1, 21);
    add("random " + std::to_string(t), out, in, n, sps[r.range(0, 6)], r.chance(0.5) ? 16 : 32, int(r.range(0, 5)),
        int(r.range(0, 3)), r.chance(0.5) ? 0.15 : 0.0, r.chance(0.5) ? 0.15 : 0.0, int(r.range(0, 2)), r.chance(0.5));
  }
  // Random medium cases: longer rows and batches.
  for (int t = 0; t < 40; ++t) {
    const int64_t out = r.range(1, 160), in = r.range(1, 160), n = r.range(1, 70);
    add("random medium " + std::to_string(t), out, in, n, sps[r.range(0, 5)], r.chance(0.5) ? 16 : 32,
        int(r.range(0, 5)), int(r.range(0, 3)), r.chance(0.5) ? 0.1 : 0.0, r.chance(0.5) ? 0.1 : 0.0,
        int(r.range(0, 2)), r.chance(0.5));
  }
  return c;
}

// ---- block-sparse variants (csrc/kernels/block_sparse/) ----
// W as an R x C block grid (padded CSR over the grid, R * C values per slot, NaN in spare
// slots), operands with NaN-filled leading-dimension padding, checked against double loops
// with the tolerance above; dW must be exactly 0 at spare slots; 2 threads give the bits of 1.

template <typename Idx, typename F16, typename F32>
auto pick_fn(F16 f16, F32 f32) {
  if constexpr (sizeof(Idx) == 2)
    return f16;
  else
    return f32;
}

// A float32 line: checked against the double loops. A bfloat16 line (`v.dtype`): its operands are
// X and dY rounded to bfloat16, and its result must be bitwise its float32 twin's on those values
// widened, with Y / dX rounded once (the twin passes the double check on its own).
template <typename Idx>
void check_block_case(const sparselab::Variant& v, int64_t grows, int64_t gcols, int64_t n, double density,
                      int ld_extra, bool bias, uint64_t seed) {
  const bool low = v.dtype == "bfloat16";
  const sparselab::Variant* twin = low ? float32_twin(v) : nullptr;
  const int R = v.block_rows, C = v.block_cols;
  const int64_t out = grows * R, in = gcols * C;
  Rng rng(seed);
  std::vector<int64_t> row_start{0};
  std::vector<int32_t> row_nnz;
  std::vector<Idx> cols;
  for (int64_t i = 0; i < grows; ++i) {
    int32_t live = 0;
    for (int64_t j = 0; j < gcols; ++j)
      if (rng.chance(density)) {
        cols.push_back(Idx(j));
        ++live;
      }
    const int spare = int(rng.range(0, 2));
    for (int k = 0; k < spare; ++k) cols.push_back(Idx(-1));
    row_nnz.push_back(live);
    row_start.push_back(int64_t(cols.size()));
  }
  const int64_t cap = int64_t(cols.size());
  Guarded<float> values(size_t(std::max<int64_t>(cap * R * C, 1)));
  for (int64_t i = 0; i < grows; ++i)
    for (int64_t k = row_start[i]; k < row_start[i + 1]; ++k)
      for (int e = 0; e < R * C; ++e)
        values[size_t(k * R * C + e)] = k - row_start[i] < row_nnz[i] ? rng.value() : kNaN;
  const int64_t ldx = in + ld_extra, ldy = out + ld_extra;
  Guarded<float> x(size_t(std::max<int64_t>(n * ldx, 1))), dy(size_t(std::max<int64_t>(n * ldy, 1)));
  Guarded<float> b{size_t(out)};
  for (int64_t q = 0; q < n * ldx; ++q) x[size_t(q)] = q % ldx < in ? rng.value() : kNaN;
  for (int64_t q = 0; q < n * ldy; ++q) dy[size_t(q)] = q % ldy < out ? rng.value() : kNaN;
  for (int64_t o = 0; o < out; ++o) b[size_t(o)] = rng.value();
  // A bfloat16 line's operands (NaN padding stays NaN); x and dy then hold exactly their values.
  Guarded<Bf16> xb(low ? x.size() : 0), dyb(low ? dy.size() : 0);
  for (size_t k = 0; k < xb.size(); ++k) x[k] = bf16_to_float(xb[k] = float_to_bf16(x[k]));
  for (size_t k = 0; k < dyb.size(); ++k) dy[k] = bf16_to_float(dyb[k] = float_to_bf16(dy[k]));
  const CsrView<Idx> w{values.data(), cols.data(), row_start.data(), row_nnz.data(), grows, gcols};
  const std::vector<int64_t> chunks = make_chunks(grows, 2, rng);
  const int64_t nchunks = int64_t(chunks.size()) - 1;

  // ref[e], scale[e], len: the double result, sum |terms| and dot length of each output.
  std::vector<double> ref, scale;
  int64_t len = 0;
  const char* opn = op_name(v.op);
  if (v.op == Op::BlockSpmmFwd || v.op == Op::BlockSpmmDx) {
    const bool fwd = v.op == Op::BlockSpmmFwd;
    const int64_t rows_out = fwd ? out : in;
    ref.assign(size_t(n * rows_out), 0.0);
    scale.assign(size_t(n * rows_out), 0.0);
    len = (fwd ? in : out) + 1;
    for (int64_t q = 0; q < n; ++q)
      for (int64_t i = 0; i < grows; ++i)
        for (int32_t k = 0; k < row_nnz[i]; ++k) {
          const int64_t slot = row_start[i] + k, j = int64_t(cols[size_t(slot)]);
          for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) {
              const double wv = values[size_t(slot * R * C + r * C + c)];
              const int64_t o = i * R + r, a = j * C + c;
              const double t = fwd ? wv * x[size_t(q * ldx + a)] : wv * dy[size_t(q * ldy + o)];
              const int64_t e = q * rows_out + (fwd ? o : a);
              ref[size_t(e)] += t;
              scale[size_t(e)] += std::fabs(t);
            }
        }
    if (fwd && bias)
      for (int64_t q = 0; q < n; ++q)
        for (int64_t o = 0; o < out; ++o) {
          ref[size_t(q * out + o)] += b[size_t(o)];
          scale[size_t(q * out + o)] += std::fabs(b[size_t(o)]);
        }
  } else {
    ref.assign(size_t(cap * R * C), 0.0);
    scale.assign(size_t(cap * R * C), 0.0);
    len = n;
    for (int64_t i = 0; i < grows; ++i)
      for (int32_t k = 0; k < row_nnz[i]; ++k) {
        const int64_t slot = row_start[i] + k, j = int64_t(cols[size_t(slot)]);
        for (int r = 0; r < R; ++r)
          for (int c = 0; c < C; ++c)
            for (int64_t q = 0; q < n; ++q) {
              const double t = double(dy[size_t(q * ldy + i * R + r)]) * x[size_t(q * ldx + j * C + c)];
              ref[size_t(slot * R * C + r * C + c)] += t;
              scale[size_t(slot * R * C + r * C + c)] += std::fabs(t);
            }
      }
    for (int64_t o = 0; o < out; ++o) {  // then the bias gradient (DwArgs::db), dY's column sums
      double sum = 0.0, mag = 0.0;
      for (int64_t q = 0; q < n; ++q) {
        sum += dy[size_t(q * ldy + o)];
        mag += std::fabs(dy[size_t(q * ldy + o)]);
      }
      ref.push_back(sum);
      scale.push_back(mag);
    }
  }

  // One variant's output, an activation-shaped one of a bfloat16 line widened (untouched slots
  // as kOutSentinel); a dW variant's is dW, then db.
  auto run_one = [&](const sparselab::Variant& k, int threads) {
    const bool line = k.dtype == "bfloat16", act_out = k.op != Op::BlockSddmmDw;
    const int64_t rows_out = k.op == Op::BlockSpmmFwd ? out : in;
    const size_t count = act_out ? size_t(n * rows_out) : size_t(cap * R * C);
    // Outputs end at a PROT_NONE page (Guarded): a store past Y, dX or dW faults.
    const bool narrow = line && act_out;
    Guarded<float> got32(narrow ? 0 : count);
    Guarded<Bf16> got16(narrow ? count : 0);
    for (size_t e = 0; e < got32.size(); ++e) got32[e] = from_bits(kOutSentinel);
    for (size_t e = 0; e < got16.size(); ++e) got16[e] = Bf16{kOutSentinelBf16};
    float* dst = narrow ? reinterpret_cast<float*>(got16.data()) : got32.data();
    const float* xp = line ? reinterpret_cast<const float*>(xb.data()) : x.data();
    const float* dyp = line ? reinterpret_cast<const float*>(dyb.data()) : dy.data();
    Scratch sc(k.scratch(n, gcols, grows, cap, threads));
    float* sp = sc.ptr();
    if (k.op == Op::BlockSpmmFwd) {
      FwdArgs<Idx> a{w, n, xp, ldx, bias ? b.data() : nullptr, dst, out, chunks.data(), nchunks, sp, threads};
      pick_fn<Idx>(k.fwd16, k.fwd32)(a);
    } else if (k.op == Op::BlockSpmmDx) {
      DxArgs<Idx> a{w, n, dyp, ldy, dst, in, chunks.data(), nchunks, sp, threads};
      pick_fn<Idx>(k.dx16, k.dx32)(a);
    }
    Guarded<float> db(act_out ? 0 : size_t(out));
    for (size_t e = 0; e < db.size(); ++e) db[e] = from_bits(kOutSentinel);
    if (k.op == Op::BlockSddmmDw) {
      DwArgs<Idx> a{w, n, dyp, ldy, xp, ldx, dst, chunks.data(), nchunks, sp, threads};
      a.db = db.data();
      pick_fn<Idx>(k.dw16, k.dw32)(a);
    }
    std::vector<float> got(count);
    for (size_t e = 0; e < count; ++e)
      got[e] = !narrow                             ? got32[e]
               : got16[e].bits == kOutSentinelBf16 ? from_bits(kOutSentinel)
                                                   : bf16_to_float(got16[e]);
    got.insert(got.end(), db.data(), db.data() + db.size());
    if (!sc.intact()) got.assign(got.size(), from_bits(kScratchSlack));  // fails the comparison below
    return got;
  };
  auto run = [&](int threads) { return run_one(v, threads); };
  const std::string what = std::string(opn) + "/" + v.name + " grid " + std::to_string(grows) + "x" +
                           std::to_string(gcols) + " N=" + std::to_string(n) + " idx" + std::to_string(8 * sizeof(Idx));
  snprintf(g_current, sizeof g_current, "%s", what.c_str());
  const std::vector<float> one = run(1), two = run(2);
  std::string err;
  if (low) {
    if (twin == nullptr) {
      record(false, what, "no float32 twin in the registry");
      return;
    }
    const std::vector<float> want = run_one(*twin, 1);
    for (size_t e = 0; e < one.size() && err.empty(); ++e) {
      // dW is float32; activation outputs are the twin's rounded once (its untouched slots too).
      const bool as_is = v.op == Op::BlockSddmmDw || bits(want[e]) == kOutSentinel;
      const float wv = as_is ? want[e] : bf16_to_float(float_to_bf16(want[e]));
      if (bits(one[e]) != bits(wv))
        err = "element " + std::to_string(e) + ": got " + std::to_string(one[e]) + ", " + twin->name + " rounded " +
              std::to_string(wv);
    }
  }
  for (size_t e = 0; e < one.size() && err.empty() && !low; ++e) {
    const double tol = 2.0 * double(len + 2) * std::ldexp(1.0, -24) * scale[e];
    if (!(std::fabs(double(one[e]) - ref[e]) <= tol))
      err = "element " + std::to_string(e) + ": got " + std::to_string(one[e]) + " want " + std::to_string(ref[e]);
  }
  if (err.empty() && v.op == Op::BlockSddmmDw)
    for (int64_t i = 0; i < grows && err.empty(); ++i)
      for (int64_t k = row_start[i] + row_nnz[i]; k < row_start[i + 1]; ++k)
        for (int e = 0; e < R * C; ++e)
          if (bits(one[size_t(k * R * C + e)]) != 0) err = "spare slot " + std::to_string(k) + " not 0";
  if (err.empty() && std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) != 0)
    err = "2 threads differ from 1";
  record(err.empty(), what, err);
}

void check_block_variants() {
  for (const sparselab::Variant& v : variants()) {
    if (v.op != Op::BlockSpmmFwd && v.op != Op::BlockSpmmDx && v.op != Op::BlockSddmmDw) continue;
    // More block rows than any form's row group, more block columns than any column block.
    check_block_case<int16_t>(v, 70, 300, 9, 0.05, 1, true, 5);
    uint64_t seed = 77;
    for (int idx : {16, 32})
      for (int64_t n : {1, 3, 8, 17, 40, 129})
        for (double density : {0.0, 0.3, 1.0}) {
          const int64_t grows = 1 + int64_t(seed % 7), gcols = 1 + int64_t((seed * 7) % 45);
          if (idx == 16)
            check_block_case<int16_t>(v, grows, gcols, n, density, int(seed % 4), seed % 2 == 0, seed);
          else
            check_block_case<int32_t>(v, grows, gcols, n, density, int(seed % 4), seed % 2 == 0, seed);
          ++seed;
        }
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int k = 1; k < argc; ++k) {
    if (std::strcmp(argv[k], "-v") == 0)
      g_verbose = true;
    else {
      fprintf(stderr, "usage: %s [-v]\n", argv[0]);
      return 2;
    }
  }
  signal(SIGSEGV, on_crash);
  signal(SIGBUS, on_crash);
  signal(SIGILL, on_crash);
  signal(SIGFPE, on_crash);

  // The registry must hold NEON variants of every op, or this check is empty.
  const char* ops[] = {"spmm_fwd", "spmm_dx", "sddmm_dw"};
  printf("variants:");
  for (const NcVariant& v : registry()) printf(" %s/%s", v.op, v.name);
  printf("\n");
  for (const char* op : ops) {
    int count = 0;
    for (const NcVariant& v : registry()) count += std::strcmp(v.op, op) == 0 && std::strcmp(v.isa, "neon") == 0;
    record(count > 0, std::string("registry has a neon variant of ") + op, "none listed in csrc/variants.def for neon");
  }

  // Every form exists for NEON too (csrc/kernels/vec/vec_neon.h runs the generic ones).
  const char* forms[][2] = {{"spmm_fwd", "plain"},
                            {"spmm_fwd", "unrolled"},
                            {"spmm_fwd", "tiled"},
                            {"spmm_fwd", "blocked"},
                            {"spmm_fwd", "block_major"},
                            {"spmm_dx", "tiled"},
                            {"spmm_dx", "blocked"},
                            {"spmm_dx", "block_major"},
                            {"spmm_dx", "scatter_block_major"},
                            {"sddmm_dw", "plain"},
                            {"sddmm_dw", "unrolled"},
                            {"sddmm_dw", "tiled"},
                            {"sddmm_dw", "blocked"},
                            {"sddmm_dw", "block_major"},
                            {"spmm_fwd", "inflight"},
                            {"spmm_dx", "inflight"},
                            {"sddmm_dw", "rowreg"},
                            {"spmm_fwd", "lanes"},
                            {"block_spmm_fwd", "tiled_bf16"},
                            {"block_spmm_dx", "scatter_bf16"},
                            {"block_sddmm_dw", "tiled_bf16"}};
  for (const auto& f : forms) {
    bool found = false;
    for (const sparselab::Variant& v : variants())
      found |= v.isa == "neon" && std::strcmp(op_name(v.op), f[0]) == 0 && v.form == f[1];
    record(found, std::string("registry has a neon ") + f[0] + " variant of form " + f[1],
           "no such line in csrc/variants.def");
  }

  const auto all = cases();
  for (const CaseSpec& s : all) check(s);
  check_block_variants();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
