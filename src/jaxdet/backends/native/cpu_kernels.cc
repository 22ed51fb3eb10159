// jaxdet's XLA:CPU kernels: XLA FFI custom calls for the passes that XLA:CPU runs as many
// separate sweeps over memory. Built at run time by jaxdet.cpu_kernels with the system's C++
// compiler against jax's own FFI headers (jax.ffi.include_dir()), tuned for the machine
// (-march=native), and registered with jax.ffi.register_ffi_target. Every kernel has a
// jnp twin in jaxdet that computes the same function; tests compare the two.
//
// Conventions: float32, row-major (XLA's default layout {n-1,...,0}), NHWC activations.
// Work is split into a fixed number of chunks whose partial results are added in chunk order,
// so a result does not depend on how many threads ran it.

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// 16 floats: one AVX-512 register where the CPU has them; GCC and Clang lower the same code to
// narrower registers elsewhere. aligned(4): loads from any float address.
typedef float Vec __attribute__((vector_size(64), aligned(4)));
constexpr int64_t kLanes = 16;

inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline Vec Splat(float s) {
  return Vec{s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
}

// A row of n floats padded to whole vectors: the row stride of the kernels' partial sums.
inline int64_t PaddedRow(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

inline void AddTo(float* p, Vec v) {
  v += Load(p);
  std::memcpy(p, &v, sizeof v);
}

// Chunks of work taken from a shared counter by the calling thread and by helper tasks on
// XLA's intra-op pool. The caller returns once every chunk is done. A helper that starts after
// the caller took the last chunk finds none and touches nothing but this (shared) state, so the
// caller never waits for a helper that has not started (no deadlock when the pool is busy).
struct ChunkCounter {
  explicit ChunkCounter(int64_t n) : total(n) {}
  const int64_t total;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::function<void(int64_t)> work;  // only called for a chunk claimed before `done == total`

  void Drain() {
    for (int64_t i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
      work(i);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

void RunChunks(ffi::ThreadPool& pool, int64_t chunks, std::function<void(int64_t)> work) {
  auto counter = std::make_shared<ChunkCounter>(chunks);
  counter->work = std::move(work);
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), chunks) - 1;
  for (int64_t h = 0; h < helpers; ++h) pool.Schedule([counter] { counter->Drain(); });
  counter->Drain();
  while (counter->done.load(std::memory_order_acquire) < chunks) std::this_thread::yield();
}

// The range [lo, hi) of output columns w whose input column w * stride + tap - pad lies in
// [0, width).
void ValidColumns(int64_t out_width, int64_t width, int64_t stride, int64_t tap, int64_t pad,
                  int64_t* lo, int64_t* hi) {
  int64_t first = 0;
  while (first < out_width && first * stride + tap - pad < 0) ++first;
  int64_t last = out_width;
  while (last > first && (last - 1) * stride + tap - pad >= width) --last;
  *lo = first;
  *hi = last;
}

// acc[c] += sum over w in [lo, hi) of x[(w * stride + offset) * C + c] * g[w * C + c].
void DotColumns(const float* x, const float* g, int64_t lo, int64_t hi, int64_t stride,
                int64_t offset, int64_t C, float* acc) {
  int64_t c = 0;
  for (; c + 4 * kLanes <= C; c += 4 * kLanes) {
    Vec s0 = {}, s1 = {}, s2 = {}, s3 = {};
    for (int64_t w = lo; w < hi; ++w) {
      const float* xp = x + (w * stride + offset) * C + c;
      const float* gp = g + w * C + c;
      s0 += Load(xp) * Load(gp);
      s1 += Load(xp + kLanes) * Load(gp + kLanes);
      s2 += Load(xp + 2 * kLanes) * Load(gp + 2 * kLanes);
      s3 += Load(xp + 3 * kLanes) * Load(gp + 3 * kLanes);
    }
    AddTo(acc + c, s0);
    AddTo(acc + c + kLanes, s1);
    AddTo(acc + c + 2 * kLanes, s2);
    AddTo(acc + c + 3 * kLanes, s3);
  }
  for (; c + kLanes <= C; c += kLanes) {
    Vec s = {};
    for (int64_t w = lo; w < hi; ++w) s += Load(x + (w * stride + offset) * C + c) * Load(g + w * C + c);
    AddTo(acc + c, s);
  }
  for (; c < C; ++c) {
    float s = 0.f;
    for (int64_t w = lo; w < hi; ++w) s += x[(w * stride + offset) * C + c] * g[w * C + c];
    acc[c] += s;
  }
}

constexpr int64_t kChunks = 16;

// Rank-typed buffers (aliases keep the commas out of the FFI binding macro).
using Image = ffi::Buffer<ffi::F32, 4>;
using Matrix = ffi::Buffer<ffi::F32, 2>;
using Batch = ffi::Buffer<ffi::F32, 3>;
using IndexBatch = ffi::Buffer<ffi::S32, 3>;

// The kernel gradient of a depthwise convolution (no dilation):
//   out[i * kw + j, c] = sum_{b, h, w} x[b, h * sh + i - pt, w * sw + j - pl, c] * g[b, h, w, c]
// over the taps that fall inside x (zero padding). x: [B, H, W, C], g: [B, Ho, Wo, C],
// out: [kh * kw, C]. One pass over x and g instead of kh * kw reductions.
ffi::Error DepthwiseKernelGradient(ffi::ThreadPool pool, Image x, Image g,
                                   ffi::Result<Matrix> out, int64_t kh, int64_t kw,
                                   int64_t sh, int64_t sw, int64_t pt, int64_t pl) {
  const auto xd = x.dimensions();
  const auto gd = g.dimensions();
  const int64_t B = xd[0], H = xd[1], W = xd[2], C = xd[3];
  const int64_t Ho = gd[1], Wo = gd[2];
  if (gd[0] != B || gd[3] != C || out->dimensions()[0] != kh * kw ||
      out->dimensions()[1] != C || sh < 1 || sw < 1) {
    return ffi::Error::InvalidArgument("jaxdet_depthwise_kernel_gradient: shapes disagree");
  }
  const float* xp = x.typed_data();
  const float* gp = g.typed_data();
  const int64_t taps = kh * kw, rows = B * Ho;
  const int64_t chunks = std::max<int64_t>(1, std::min(kChunks, rows));
  std::vector<int64_t> lo(kw), hi(kw);
  for (int64_t j = 0; j < kw; ++j) ValidColumns(Wo, W, sw, j, pl, &lo[j], &hi[j]);
  std::vector<float> partial(chunks * taps * C, 0.f);
  RunChunks(pool, chunks, [&](int64_t chunk) {
    float* acc = partial.data() + chunk * taps * C;
    std::vector<float> row(taps * C);
    for (int64_t r = chunk * rows / chunks; r < (chunk + 1) * rows / chunks; ++r) {
      const int64_t b = r / Ho, h = r % Ho;
      const float* grow = gp + r * Wo * C;
      std::fill(row.begin(), row.end(), 0.f);
      for (int64_t i = 0; i < kh; ++i) {
        const int64_t in_row = h * sh + i - pt;
        if (in_row < 0 || in_row >= H) continue;
        const float* xrow = xp + (b * H + in_row) * W * C;
        for (int64_t j = 0; j < kw; ++j) {
          DotColumns(xrow, grow, lo[j], hi[j], sw, j - pl, C, row.data() + (i * kw + j) * C);
        }
      }
      for (int64_t k = 0; k < taps * C; ++k) acc[k] += row[k];
    }
  });
  float* o = out->typed_data();
  std::fill(o, o + taps * C, 0.f);
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const float* acc = partial.data() + chunk * taps * C;
    for (int64_t k = 0; k < taps * C; ++k) o[k] += acc[k];
  }
  return ffi::Error::Success();
}


// ---------------------------------------------------------------------------------------------
// out[C, O] = x[N, C]^T g[N, O]: the kernel gradient of a 1x1 convolution (or of any matmul),
// a contraction over the long dimension N of two row-major operands. XLA:CPU's matmuls want the
// contracted dimension of the left operand minor, so XLA transposes one [N, *] operand first
// (a full pass over an activation); this kernel reads both in place.

// The register-blocked core of every product here:
//   out[r, v] += sum_k a[k * a_step + r * a_row] * b[k * ldb + v]
// for MR rows r of out and NV vectors (16 columns each) of b's columns, over `depth` values of
// k, accumulated in registers, then added to out (row stride ldo). x^T g reads a = x with
// (a_step, a_row) = (C, 1); patches times a kernel reads a = patches with (1, P).
template <int MR, int NV>
void Micro(const float* a, int64_t a_step, int64_t a_row, const float* b, int64_t ldb,
           int64_t depth, float* out, int64_t ldo) {
  Vec acc[MR][NV] = {};
  for (int64_t k = 0; k < depth; ++k) {
    const float* ak = a + k * a_step;
    const float* bk = b + k * ldb;
    Vec bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = Load(bk + v * kLanes);
    for (int r = 0; r < MR; ++r) {
      const Vec ab = Splat(ak[r * a_row]);
      for (int v = 0; v < NV; ++v) acc[r][v] += ab * bv[v];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) AddTo(out + r * ldo + v * kLanes, acc[r][v]);
}

template <int MR>
void MicroRows(int nv, const float* a, int64_t a_step, int64_t a_row, const float* b,
               int64_t ldb, int64_t depth, float* out, int64_t ldo) {
  switch (nv) {
    case 1: return Micro<MR, 1>(a, a_step, a_row, b, ldb, depth, out, ldo);
    case 2: return Micro<MR, 2>(a, a_step, a_row, b, ldb, depth, out, ldo);
    case 3: return Micro<MR, 3>(a, a_step, a_row, b, ldb, depth, out, ldo);
    default: return Micro<MR, 4>(a, a_step, a_row, b, ldb, depth, out, ldo);
  }
}

constexpr int64_t kBlockRows = 4;     // MR
constexpr int64_t kBlockVectors = 4;  // NV

// out[R, V * 16] += sum_k a(k, r) * b[k, :] for all R rows (blocks of 4, then the rest) and
// V vectors of b's columns (panels of 4, then the rest); b's rows are ldb floats apart.
void Product(const float* a, int64_t a_step, int64_t a_row, int64_t R, const float* b,
             int64_t ldb, int64_t V, int64_t depth, float* out, int64_t ldo) {
  for (int64_t v0 = 0; v0 < V; v0 += kBlockVectors) {
    const int nv = static_cast<int>(std::min(kBlockVectors, V - v0));
    for (int64_t r0 = 0; r0 < R; r0 += kBlockRows) {
      const int mr = static_cast<int>(std::min(kBlockRows, R - r0));
      const float* ar = a + r0 * a_row;
      const float* bv = b + v0 * kLanes;
      float* o = out + r0 * ldo + v0 * kLanes;
      switch (mr) {
        case 1: MicroRows<1>(nv, ar, a_step, a_row, bv, ldb, depth, o, ldo); break;
        case 2: MicroRows<2>(nv, ar, a_step, a_row, bv, ldb, depth, o, ldo); break;
        case 3: MicroRows<3>(nv, ar, a_step, a_row, bv, ldb, depth, o, ldo); break;
        default: MicroRows<4>(nv, ar, a_step, a_row, bv, ldb, depth, o, ldo); break;
      }
    }
  }
}

constexpr int64_t kTileRows = 256;          // rows of x and g per tile (g's panel stays in L2)
constexpr int64_t kMaxPartialFloats = 1 << 22;  // 16 MB of per-chunk partial sums at most

// out[C, O] += x[rows, C]^T g[rows, O] into `out` with row stride `ldo` (>= O rounded up to
// whole vectors: the last partial vector of g's columns is copied into a zero-padded buffer).
void TransposedProduct(const float* x, const float* g, int64_t rows, int64_t C, int64_t O,
                       float* out, int64_t ldo) {
  const int64_t full = O / kLanes, tail = O % kLanes;
  std::vector<float> tail_g(tail ? kTileRows * kLanes : 0, 0.f);
  for (int64_t n0 = 0; n0 < rows; n0 += kTileRows) {
    const int64_t nt = std::min(kTileRows, rows - n0);
    const float* xt = x + n0 * C;
    const float* gt = g + n0 * O;
    if (tail) {
      for (int64_t n = 0; n < nt; ++n)
        std::memcpy(tail_g.data() + n * kLanes, gt + n * O + full * kLanes, tail * sizeof(float));
    }
    // g's whole vectors in place, then its zero-padded last partial vector.
    Product(xt, C, 1, C, gt, O, full, nt, out, ldo);
    if (tail) Product(xt, C, 1, C, tail_g.data(), kLanes, 1, nt, out + full * kLanes, ldo);
  }
}

// out[R, O] = the sum over chunks, in chunk order, of partial[chunk] [R, ldo].
void SumPartials(const float* partial, int64_t chunks, int64_t R, int64_t O, int64_t ldo,
                 float* out) {
  for (int64_t r = 0; r < R; ++r) {
    float* orow = out + r * O;
    std::memcpy(orow, partial + r * ldo, O * sizeof(float));
    for (int64_t chunk = 1; chunk < chunks; ++chunk) {
      const float* prow = partial + (chunk * R + r) * ldo;
      for (int64_t k = 0; k < O; ++k) orow[k] += prow[k];
    }
  }
}

// out[C, O] = x[N, C]^T g[N, O] (row-major, row strides C and O): the N rows split into chunks
// whose partial products are added in chunk order.
void SplitTransposedProduct(ffi::ThreadPool& pool, const float* xp, const float* gp, int64_t N,
                            int64_t C, int64_t O, float* op) {
  const int64_t ldo = PaddedRow(O);
  int64_t chunks = std::max<int64_t>(1, std::min(kChunks, N / (4 * kTileRows)));
  while (chunks > 1 && chunks * C * ldo > kMaxPartialFloats) chunks /= 2;
  std::vector<float> partial(chunks * C * ldo, 0.f);
  RunChunks(pool, chunks, [&](int64_t chunk) {
    const int64_t lo = chunk * N / chunks, hi = (chunk + 1) * N / chunks;
    TransposedProduct(xp + lo * C, gp + lo * O, hi - lo, C, O, partial.data() + chunk * C * ldo,
                      ldo);
  });
  SumPartials(partial.data(), chunks, C, O, ldo, op);
}

// out[X, C, O] = x[X, N, C]^T g[X, N, O], one product per leading index. One product splits
// its N rows into chunks (partial sums added in order); a batch of them runs one product per
// chunk.
ffi::Error MatmulTransposedLeft(ffi::ThreadPool pool, Batch x, Batch g, ffi::Result<Batch> out) {
  const int64_t X = x.dimensions()[0], N = x.dimensions()[1], C = x.dimensions()[2];
  const int64_t O = g.dimensions()[2];
  if (g.dimensions()[0] != X || g.dimensions()[1] != N || out->dimensions()[0] != X ||
      out->dimensions()[1] != C || out->dimensions()[2] != O) {
    return ffi::Error::InvalidArgument("jaxdet_matmul_transposed_left: shapes disagree");
  }
  const float* xp = x.typed_data();
  const float* gp = g.typed_data();
  float* op = out->typed_data();
  if (X > 1) {
    const int64_t ldo = PaddedRow(O);
    RunChunks(pool, X, [&](int64_t b) {
      std::vector<float> product(C * ldo, 0.f);
      TransposedProduct(xp + b * N * C, gp + b * N * O, N, C, O, product.data(), ldo);
      SumPartials(product.data(), 1, C, O, ldo, op + b * C * O);
    });
    return ffi::Error::Success();
  }
  SplitTransposedProduct(pool, xp, gp, N, C, O, op);
  return ffi::Error::Success();
}

// The same for one product of matrices x[N, C], g[N, O] -> out[C, O]. Taking the operands at
// their own rank matters to XLA: an operand reshaped to [1, N, O] for the batched form is a
// second shape of the same value, and XLA then computes its elementwise producer twice (once
// per shape; seen for the batch-norm input gradients feeding MobileNetV2's 1x1 convolutions).
ffi::Error MatmulTransposedLeftMatrix(ffi::ThreadPool pool, Matrix x, Matrix g,
                                      ffi::Result<Matrix> out) {
  const int64_t N = x.dimensions()[0], C = x.dimensions()[1], O = g.dimensions()[1];
  if (g.dimensions()[0] != N || out->dimensions()[0] != C || out->dimensions()[1] != O) {
    return ffi::Error::InvalidArgument("jaxdet_matmul_transposed_left_matrix: shapes disagree");
  }
  SplitTransposedProduct(pool, x.typed_data(), g.typed_data(), N, C, O, out->typed_data());
  return ffi::Error::Success();
}

// ---------------------------------------------------------------------------------------------
// Convolutions of images (a few input channels: a backbone's stem), forward and kernel
// gradient, as products of each output pixel's patch with the kernel. XLA:CPU's own convolution
// runs the 3x3/2 stem of MobileNetV2 at a few G multiply-adds/s; jnp's patch matmul writes nine
// taps and a concatenation of them (minor dimension 3) and transposes one operand for the
// kernel gradient. Here patches are built a tile of pixels at a time in a small buffer.

struct ConvGeometry {
  int64_t B, H, W, C, Ho, Wo, kh, kw, sh, sw, pt, pl;
  int64_t patch() const { return kh * kw * C; }
};

// The patches [count, P] (tap-major, channel-minor, zero outside the image: the order of an
// HWIO kernel reshaped to [P, O]) of output pixels first .. first + count - 1 (b, h, w order).
void BuildPatches(const float* x, const ConvGeometry& g, int64_t first, int64_t count,
                  float* patches) {
  const int64_t P = g.patch();
  for (int64_t n = 0; n < count; ++n) {
    const int64_t pixel = first + n;
    const int64_t b = pixel / (g.Ho * g.Wo), h = pixel / g.Wo % g.Ho, w = pixel % g.Wo;
    float* p = patches + n * P;
    const int64_t col0 = w * g.sw - g.pl;  // a tap row's kw pixels are contiguous in x
    const bool cols_inside = col0 >= 0 && col0 + g.kw <= g.W;
    for (int64_t i = 0; i < g.kh; ++i, p += g.kw * g.C) {
      const int64_t row = h * g.sh + i - g.pt;
      if (row < 0 || row >= g.H) {
        std::fill(p, p + g.kw * g.C, 0.f);
        continue;
      }
      const float* xrow = x + (b * g.H + row) * g.W * g.C;
      if (cols_inside) {
        std::memcpy(p, xrow + col0 * g.C, g.kw * g.C * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t col = col0 + j;
        if (col < 0 || col >= g.W) {
          std::fill(p + j * g.C, p + (j + 1) * g.C, 0.f);
        } else {
          std::memcpy(p + j * g.C, xrow + col * g.C, g.C * sizeof(float));
        }
      }
    }
  }
}

ConvGeometry Geometry(const Image& x, int64_t Ho, int64_t Wo, int64_t kh, int64_t kw,
                      int64_t sh, int64_t sw, int64_t pt, int64_t pl) {
  const auto d = x.dimensions();
  return ConvGeometry{d[0], d[1], d[2], d[3], Ho, Wo, kh, kw, sh, sw, pt, pl};
}

constexpr int64_t kPixelTile = 64;

// out[B, Ho, Wo, O] = the convolution of x [B, H, W, C] with kernel [kh * kw * C, O].
ffi::Error ImageConvolution(ffi::ThreadPool pool, Image x, Matrix kernel, ffi::Result<Image> out,
                            int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t pt,
                            int64_t pl) {
  const auto od = out->dimensions();
  const ConvGeometry g = Geometry(x, od[1], od[2], kh, kw, sh, sw, pt, pl);
  const int64_t P = g.patch(), O = od[3];
  if (kernel.dimensions()[0] != P || kernel.dimensions()[1] != O || od[0] != g.B) {
    return ffi::Error::InvalidArgument("jaxdet_image_convolution: shapes disagree");
  }
  const int64_t V = (O + kLanes - 1) / kLanes, ldk = V * kLanes;
  std::vector<float> padded_kernel(P * ldk, 0.f);  // O rounded up to whole vectors
  for (int64_t k = 0; k < P; ++k)
    std::memcpy(padded_kernel.data() + k * ldk, kernel.typed_data() + k * O, O * sizeof(float));
  const int64_t pixels = g.B * g.Ho * g.Wo;
  const int64_t tiles = (pixels + kPixelTile - 1) / kPixelTile;
  const int64_t chunks = std::max<int64_t>(1, std::min(kChunks, tiles));
  const float* xp = x.typed_data();
  float* op = out->typed_data();
  RunChunks(pool, chunks, [&](int64_t chunk) {
    std::vector<float> patches(kPixelTile * P), tile(kPixelTile * ldk);
    for (int64_t t = chunk * tiles / chunks; t < (chunk + 1) * tiles / chunks; ++t) {
      const int64_t first = t * kPixelTile, count = std::min(kPixelTile, pixels - first);
      BuildPatches(xp, g, first, count, patches.data());
      std::fill(tile.begin(), tile.end(), 0.f);
      Product(patches.data(), 1, P, count, padded_kernel.data(), ldk, V, P, tile.data(), ldk);
      for (int64_t n = 0; n < count; ++n)
        std::memcpy(op + (first + n) * O, tile.data() + n * ldk, O * sizeof(float));
    }
  });
  return ffi::Error::Success();
}

// out[kh * kw * C, O] = sum over output pixels of patch^T grad: the kernel gradient of
// ImageConvolution, given its output gradient grad [B, Ho, Wo, O].
ffi::Error ImageConvolutionKernelGradient(ffi::ThreadPool pool, Image x, Image grad,
                                          ffi::Result<Matrix> out, int64_t kh, int64_t kw,
                                          int64_t sh, int64_t sw, int64_t pt, int64_t pl) {
  const auto gd = grad.dimensions();
  const ConvGeometry g = Geometry(x, gd[1], gd[2], kh, kw, sh, sw, pt, pl);
  const int64_t P = g.patch(), O = gd[3];
  if (out->dimensions()[0] != P || out->dimensions()[1] != O || gd[0] != g.B) {
    return ffi::Error::InvalidArgument("jaxdet_image_convolution_kernel_gradient: shapes disagree");
  }
  const int64_t ldo = PaddedRow(O);
  const int64_t pixels = g.B * g.Ho * g.Wo;
  int64_t chunks = std::max<int64_t>(1, std::min(kChunks, pixels / (4 * kTileRows)));
  while (chunks > 1 && chunks * P * ldo > kMaxPartialFloats) chunks /= 2;
  std::vector<float> partial(chunks * P * ldo, 0.f);
  const float* xp = x.typed_data();
  const float* gp = grad.typed_data();
  RunChunks(pool, chunks, [&](int64_t chunk) {
    const int64_t lo = chunk * pixels / chunks, hi = (chunk + 1) * pixels / chunks;
    std::vector<float> patches(kTileRows * P);
    for (int64_t first = lo; first < hi; first += kTileRows) {
      const int64_t count = std::min(kTileRows, hi - first);
      BuildPatches(xp, g, first, count, patches.data());
      TransposedProduct(patches.data(), gp + first * O, count, P, O,
                        partial.data() + chunk * P * ldo, ldo);
    }
  });
  SumPartials(partial.data(), chunks, P, O, ldo, out->typed_data());
  return ffi::Error::Success();
}


// ---------------------------------------------------------------------------------------------
// Winograd F(4x4, 3x3) tiles (jaxdet.models.winograd): the input transform B^T d B of every
// 6x6 input tile (zero padding of one pixel, tiles 4 pixels apart) and the adjoint of the
// output transform, A g A^T of every 4x4 block of an output gradient, each in one pass, to the
// layout [36, tiles, channels] that the 36 products read. XLA splits each transform into
// several passes over the tiles and, when it fuses the gradient's producer into them,
// computes that producer again for each tile position.

constexpr float kInputTransform[6][6] = {
    {4, 0, -5, 0, 1, 0}, {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
    {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
// A, the transpose of the output transform A^T [4, 6].
constexpr float kOutputTransformAdjoint[6][4] = {
    {1, 0, 0, 0}, {1, 1, 1, 1}, {1, -1, 1, -1}, {1, 2, 4, 8}, {1, -2, 4, -8}, {0, 0, 0, 1}};

struct TileGeometry {
  int64_t B, H, W, C, nh, nw;
  int64_t tiles() const { return B * nh * nw; }
};

// One channel block (a Vec of 16 channels, or a float for the last few) of one tile.
template <typename T>
inline T LoadAt(const float* p) {
  if constexpr (sizeof(T) == sizeof(float)) return *p; else return Load(p);
}
template <typename T>
inline void StoreAt(float* p, T v) {
  if constexpr (sizeof(T) == sizeof(float)) *p = v; else std::memcpy(p, &v, sizeof v);
}

// out[(i * 6 + j) * T + tile, c] = (M d M^T)[i, j] for the K x K block d of `src` whose
// top-left pixel is (4 * th + offset, 4 * tw + offset) (zero outside the image), M [6, K]:
// Winograd's input transform B^T d B (K = 6, offset -1) and the adjoint A g A^T of its output
// transform (K = 4, offset 0).
template <typename T, int K, int kOffset, const float (&M)[6][K]>
void TransformTile(const float* src, const TileGeometry& g, int64_t tile, int64_t c,
                   float* out) {
  const int64_t b = tile / (g.nh * g.nw), th = tile / g.nw % g.nh, tw = tile % g.nw;
  T d[K][K];
  for (int r = 0; r < K; ++r) {
    const int64_t row = 4 * th + r + kOffset;
    for (int s = 0; s < K; ++s) {
      const int64_t col = 4 * tw + s + kOffset;
      d[r][s] = (row < 0 || row >= g.H || col < 0 || col >= g.W)
                    ? T{} : LoadAt<T>(src + ((b * g.H + row) * g.W + col) * g.C + c);
    }
  }
  T rows[6][K];  // M d
  for (int i = 0; i < 6; ++i)
    for (int s = 0; s < K; ++s) {
      T acc{};
      for (int r = 0; r < K; ++r)
        if (M[i][r] != 0) acc += M[i][r] * d[r][s];
      rows[i][s] = acc;
    }
  const int64_t plane = g.tiles() * g.C;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) {
      T acc{};
      for (int s = 0; s < K; ++s)
        if (M[j][s] != 0) acc += M[j][s] * rows[i][s];
      StoreAt<T>(out + (i * 6 + j) * plane + tile * g.C + c, acc);
    }
}

template <void (*VecTile)(const float*, const TileGeometry&, int64_t, int64_t, float*),
          void (*FloatTile)(const float*, const TileGeometry&, int64_t, int64_t, float*)>
ffi::Error WinogradTiles(ffi::ThreadPool pool, Image x, ffi::Result<Batch> out) {
  const auto d = x.dimensions();
  const TileGeometry g{d[0], d[1], d[2], d[3], (d[1] + 3) / 4, (d[2] + 3) / 4};
  const auto od = out->dimensions();
  if (od[0] != 36 || od[1] != g.tiles() || od[2] != g.C) {
    return ffi::Error::InvalidArgument("jaxdet_winograd_*_tiles: shapes disagree");
  }
  const float* xp = x.typed_data();
  float* op = out->typed_data();
  const int64_t tiles = g.tiles(), chunks = std::max<int64_t>(1, std::min(kChunks, tiles));
  RunChunks(pool, chunks, [&](int64_t chunk) {
    for (int64_t t = chunk * tiles / chunks; t < (chunk + 1) * tiles / chunks; ++t) {
      int64_t c = 0;
      for (; c + kLanes <= g.C; c += kLanes) VecTile(xp, g, t, c, op);
      for (; c < g.C; ++c) FloatTile(xp, g, t, c, op);
    }
  });
  return ffi::Error::Success();
}

ffi::Error WinogradInputTiles(ffi::ThreadPool pool, Image x, ffi::Result<Batch> out) {
  return WinogradTiles<TransformTile<Vec, 6, -1, kInputTransform>,
                       TransformTile<float, 6, -1, kInputTransform>>(pool, x, out);
}

ffi::Error WinogradOutputGradientTiles(ffi::ThreadPool pool, Image grad, ffi::Result<Batch> out) {
  return WinogradTiles<TransformTile<Vec, 4, 0, kOutputTransformAdjoint>,
                       TransformTile<float, 4, 0, kOutputTransformAdjoint>>(pool, grad, out);
}


// ---------------------------------------------------------------------------- top k
// The k largest entries of every row x[o, :, i] of x [outer, n, inner] (a row runs down the
// middle axis: scores [B, anchors, classes] give one row per image and class, read in place):
// values [outer, inner, k] and their positions in the row, indices [outer, inner, k] int32, in
// descending order with ties at lower positions first, as lax.top_k on the row. Floats are
// ordered by their total order (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN) through
// order-preserving uint32 keys. Per row: a 2,048-bin histogram of the keys' top 11 bits finds
// the bin holding the k-th key; the keys from that bin up (k plus the bin's other members) are
// selected (nth_element) and sorted, instead of sorting the whole row.

inline uint32_t OrderKey(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return (bits >> 31) ? ~bits : (bits | 0x80000000u);
}

inline float FromOrderKey(uint32_t key) {
  const uint32_t bits = (key >> 31) ? (key & 0x7fffffffu) : ~key;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

constexpr int kTopKBins = 2048;
constexpr int kTopKShift = 21;  // 32 - 11 bits
constexpr int64_t kTopKBlock = 16;  // rows (inner positions) gathered together

// One row's top k from its keys [n] (histogram `hist` of key >> kTopKShift), written to
// values[k] and indices[k]; `cand` is scratch of n entries.
void TopKOfRow(const uint32_t* keys, const int32_t* hist, int64_t n, int64_t k,
               std::pair<uint32_t, int32_t>* cand, float* values, int32_t* indices) {
  int64_t above = 0;
  int bin = kTopKBins - 1;
  for (; bin > 0 && above + hist[bin] < k; --bin) above += hist[bin];
  int64_t m = 0;
  for (int64_t a = 0; a < n; ++a)
    if (static_cast<int>(keys[a] >> kTopKShift) >= bin) cand[m++] = {keys[a], static_cast<int32_t>(a)};
  auto before = [](const std::pair<uint32_t, int32_t>& p, const std::pair<uint32_t, int32_t>& q) {
    return p.first > q.first || (p.first == q.first && p.second < q.second);
  };
  if (m > k) std::nth_element(cand, cand + (k - 1), cand + m, before);
  std::sort(cand, cand + k, before);
  for (int64_t j = 0; j < k; ++j) {
    values[j] = FromOrderKey(cand[j].first);
    indices[j] = cand[j].second;
  }
}

ffi::Error TopKAlongAxis(ffi::ThreadPool pool, Batch x, ffi::Result<Batch> values,
                         ffi::Result<IndexBatch> indices) {
  const auto d = x.dimensions();
  const int64_t outer = d[0], n = d[1], inner = d[2];
  const auto vd = values->dimensions();
  const int64_t k = vd[2];
  if (vd[0] != outer || vd[1] != inner || k < 1 || k > n || n > INT32_MAX ||
      indices->dimensions()[0] != outer || indices->dimensions()[1] != inner ||
      indices->dimensions()[2] != k) {
    return ffi::Error::InvalidArgument("jaxdet_top_k: shapes disagree (or k > n)");
  }
  const float* xp = x.typed_data();
  float* vp = values->typed_data();
  int32_t* ip = indices->typed_data();
  const int64_t blocks = (inner + kTopKBlock - 1) / kTopKBlock;
  RunChunks(pool, outer * blocks, [&](int64_t chunk) {
    const int64_t o = chunk / blocks, i0 = chunk % blocks * kTopKBlock;
    const int64_t rows = std::min(kTopKBlock, inner - i0);
    std::vector<uint32_t> keys(rows * n);
    std::vector<int32_t> hist(rows * kTopKBins, 0);
    std::vector<std::pair<uint32_t, int32_t>> cand(n);
    const float* slab = xp + o * n * inner + i0;
    for (int64_t a = 0; a < n; ++a) {
      const float* row = slab + a * inner;
      for (int64_t r = 0; r < rows; ++r) {
        const uint32_t key = OrderKey(row[r]);
        keys[r * n + a] = key;
        ++hist[r * kTopKBins + (key >> kTopKShift)];
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t out = (o * inner + i0 + r) * k;
      TopKOfRow(keys.data() + r * n, hist.data() + r * kTopKBins, n, k, cand.data(), vp + out,
                ip + out);
    }
  });
  return ffi::Error::Success();
}

}  // namespace

// Bindings. A window's kernels take the pool, two operands, one result and the window:
// kernel size, strides, and the padding before the first row and column.
template <typename First, typename Second, typename Result>
auto WindowBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::ThreadPool>()
      .template Arg<First>()
      .template Arg<Second>()
      .template Ret<Result>()
      .template Attr<int64_t>("kh")
      .template Attr<int64_t>("kw")
      .template Attr<int64_t>("sh")
      .template Attr<int64_t>("sw")
      .template Attr<int64_t>("pt")
      .template Attr<int64_t>("pl");
}

// (Parentheses keep the template arguments' commas out of the macro's argument list.)
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxdet_depthwise_kernel_gradient, DepthwiseKernelGradient,
                              (WindowBinding<Image, Image, Matrix>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxdet_image_convolution, ImageConvolution,
                              (WindowBinding<Image, Matrix, Image>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxdet_image_convolution_kernel_gradient,
                              ImageConvolutionKernelGradient,
                              (WindowBinding<Image, Image, Matrix>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxdet_matmul_transposed_left, MatmulTransposedLeft,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<Batch>()
                                  .Arg<Batch>()
                                  .Ret<Batch>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxdet_matmul_transposed_left_matrix, MatmulTransposedLeftMatrix,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<Matrix>()
                                  .Arg<Matrix>()
                                  .Ret<Matrix>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxdet_winograd_input_tiles, WinogradInputTiles,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<Image>().Ret<Batch>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxdet_winograd_output_gradient_tiles, WinogradOutputGradientTiles,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<Image>().Ret<Batch>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaxdet_top_k, TopKAlongAxis,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<Batch>()
                                  .Ret<Batch>()
                                  .Ret<IndexBatch>());
