/* Separable image resampling for jaxdet's input pipeline (host side, called through ctypes).
 *
 * Both kernels read an interleaved image [rows, cols, channels] of uint8 or float32 through
 * byte strides (so a crop or a left-right flip of a decoded image is a view, never a copy)
 * and write [out_h, out_w, channels] of uint8 or float32 through byte strides (so the result
 * can land inside a zero-padded canvas). Each output row i and column j is described by
 * per-axis tables computed in Python (jaxdet.data.resample), which keeps the semantics there:
 *
 *  - jaxdet_resample_lerp: two taps per axis, in float32 in exactly the order TensorFlow's
 *    bilinear resize computes them:
 *        top    = in[y0, x0] + (in[y0, x1] - in[y0, x0]) * wx
 *        bottom = in[y1, x0] + (in[y1, x1] - in[y1, x0]) * wx
 *        out    = top + (bottom - top) * wy
 *    (built with -ffp-contract=off: no fused multiply-add, so the result is bit-equal to TF's
 *    and to the numpy reference).
 *  - jaxdet_resample_taps: up to k taps per axis with double weights, accumulated in double
 *    in tap order, horizontal pass first and stored as float32, then the vertical pass:
 *    Pillow's float ("F") resampling as Pillow up to 12 computes it, given its coefficients.
 *
 * A uint8 output is the float32 result rounded to the nearest integer (ties to even) and
 * clamped to [0, 255]. Returns 0, or -1 when memory for the row buffers cannot be had.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

enum { JD_U8 = 0, JD_F32 = 1 };

static inline float load(const uint8_t *p, int type) {
  return type == JD_U8 ? (float)*p : *(const float *)p;
}

/* A float32 value rounded to the nearest integer (ties to even), clamped to [0, 255]. */
static inline uint8_t round_u8(float v) {
  v = rintf(v);
  return (uint8_t)(v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v));
}

static inline void store(uint8_t *p, int type, float v) {
  if (type == JD_U8) {
    *p = round_u8(v);
  } else {
    *(float *)p = v;
  }
}

/* One input row, interpolated horizontally onto the out_w output columns. */
static void lerp_row(const uint8_t *row, int type, int64_t col_stride, int channels,
                     const int32_t *x0, const int32_t *x1, const float *wx, int64_t out_w,
                     float *out) {
  if (type == JD_U8 && channels == 3) {
    for (int64_t j = 0; j < out_w; ++j) {
      const uint8_t *a = row + x0[j] * col_stride, *b = row + x1[j] * col_stride;
      const float w = wx[j];
      for (int c = 0; c < 3; ++c) {
        const float fa = (float)a[c], fb = (float)b[c];
        out[3 * j + c] = fa + (fb - fa) * w;
      }
    }
    return;
  }
  const int elem = type == JD_U8 ? 1 : 4;
  for (int64_t j = 0; j < out_w; ++j) {
    const uint8_t *a = row + x0[j] * col_stride, *b = row + x1[j] * col_stride;
    const float w = wx[j];
    for (int c = 0; c < channels; ++c) {
      const float fa = load(a + c * elem, type), fb = load(b + c * elem, type);
      out[j * channels + c] = fa + (fb - fa) * w;
    }
  }
}

static void store_row(const float *values, int64_t out_w, int channels, uint8_t *dst,
                      int type, int64_t col_stride) {
  const int elem = type == JD_U8 ? 1 : 4;
  if (col_stride == (int64_t)channels * elem) {
    const int64_t n = out_w * channels;
    if (type == JD_U8) {
      for (int64_t k = 0; k < n; ++k) dst[k] = round_u8(values[k]);
    } else {
      float *out = (float *)dst;
      for (int64_t k = 0; k < n; ++k) out[k] = values[k];
    }
    return;
  }
  for (int64_t j = 0; j < out_w; ++j)
    for (int c = 0; c < channels; ++c)
      store(dst + j * col_stride + c * elem, type, values[j * channels + c]);
}

/* top + (bottom - top) * w for each of n values, rounded and clamped to uint8 into dst
 * (contiguous): the vertical pass and the store in one loop. */
static void mix_store_u8(const float *restrict top, const float *restrict bottom, float w,
                         int64_t n, uint8_t *restrict dst) {
  for (int64_t k = 0; k < n; ++k) dst[k] = round_u8(top[k] + (bottom[k] - top[k]) * w);
}

int jaxdet_resample_lerp(const uint8_t *src, int src_type, int64_t src_row_stride,
                         int64_t src_col_stride, int channels,
                         const int32_t *y0, const int32_t *y1, const float *wy, int64_t out_h,
                         const int32_t *x0, const int32_t *x1, const float *wx, int64_t out_w,
                         uint8_t *dst, int dst_type, int64_t dst_row_stride,
                         int64_t dst_col_stride) {
  const int64_t width = out_w * channels;
  float *buffer = malloc(sizeof(float) * (size_t)(3 * width));
  if (!buffer) return -1;
  float *rows[2] = {buffer, buffer + width}, *mixed = buffer + 2 * width;
  int64_t cached[2] = {-1, -1};
  for (int64_t i = 0; i < out_h; ++i) {
    const int64_t want[2] = {y0[i], y1[i]};
    float *got[2];
    for (int k = 0; k < 2; ++k) {
      int slot = cached[0] == want[k] ? 0 : (cached[1] == want[k] ? 1 : -1);
      if (slot < 0) {
        /* evict the slot that does not hold the other row this output row needs */
        slot = cached[0] == want[1 - k] ? 1 : 0;
        lerp_row(src + want[k] * src_row_stride, src_type, src_col_stride, channels, x0, x1,
                 wx, out_w, rows[slot]);
        cached[slot] = want[k];
      }
      got[k] = rows[slot];
    }
    const float w = wy[i], *top = got[0], *bottom = got[1];
    if (dst_type == JD_U8 && dst_col_stride == channels) {
      mix_store_u8(top, bottom, w, width, dst + i * dst_row_stride);
      continue;
    }
    for (int64_t k = 0; k < width; ++k) mixed[k] = top[k] + (bottom[k] - top[k]) * w;
    store_row(mixed, out_w, channels, dst + i * dst_row_stride, dst_type, dst_col_stride);
  }
  free(buffer);
  return 0;
}

/* The k-tap pass along the columns of rows [0, n_rows) of `src`: out[r, j] = sum_t
 * src[r, xs[j] + t] * wx[j, t] in double, stored as float32 [n_rows, out_w, channels]. */
static void taps_horizontal(const uint8_t *src, int type, int64_t row_stride, int64_t col_stride,
                            int channels, int64_t n_rows, const int32_t *xs, const int32_t *xn,
                            const double *wx, int kx, int64_t out_w, float *out) {
  const int elem = type == JD_U8 ? 1 : 4;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t *row = src + r * row_stride;
    float *o = out + r * out_w * channels;
    if (type == JD_U8 && channels == 3) {
      for (int64_t j = 0; j < out_w; ++j) {
        const double *w = wx + j * kx;
        const uint8_t *p = row + xs[j] * col_stride;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0;
        for (int t = 0; t < xn[j]; ++t, p += col_stride) {
          s0 += (float)p[0] * w[t];
          s1 += (float)p[1] * w[t];
          s2 += (float)p[2] * w[t];
        }
        o[3 * j] = (float)s0;
        o[3 * j + 1] = (float)s1;
        o[3 * j + 2] = (float)s2;
      }
      continue;
    }
    for (int64_t j = 0; j < out_w; ++j) {
      const double *w = wx + j * kx;
      for (int c = 0; c < channels; ++c) {
        double ss = 0.0;
        for (int t = 0; t < xn[j]; ++t)
          ss += load(row + (xs[j] + t) * col_stride + c * elem, type) * w[t];
        o[j * channels + c] = (float)ss;
      }
    }
  }
}

/* Horizontal pass first (over the rows the vertical pass reads), then the vertical pass. */
int jaxdet_resample_taps(const uint8_t *src, int src_type, int64_t src_row_stride,
                         int64_t src_col_stride, int channels,
                         const int32_t *ys, const int32_t *yn, const double *wy, int ky,
                         int64_t out_h,
                         const int32_t *xs, const int32_t *xn, const double *wx, int kx,
                         int64_t out_w,
                         uint8_t *dst, int dst_type, int64_t dst_row_stride,
                         int64_t dst_col_stride) {
  if (out_h == 0 || out_w == 0) return 0;
  const int64_t width = out_w * channels;
  int64_t first = ys[0], last = ys[0] + yn[0];
  for (int64_t i = 1; i < out_h; ++i) {
    if (ys[i] < first) first = ys[i];
    if (ys[i] + yn[i] > last) last = ys[i] + yn[i];
  }
  float *temp = malloc(sizeof(float) * (size_t)((last - first + 1) * width));
  double *sums = malloc(sizeof(double) * (size_t)width);
  if (!temp || !sums) {
    free(temp);
    free(sums);
    return -1;
  }
  float *mixed = temp + (last - first) * width;
  taps_horizontal(src + first * src_row_stride, src_type, src_row_stride, src_col_stride,
                  channels, last - first, xs, xn, wx, kx, out_w, temp);
  for (int64_t i = 0; i < out_h; ++i) {
    const double *w = wy + i * ky;
    const float *base = temp + (ys[i] - first) * width;
    for (int64_t k = 0; k < width; ++k) sums[k] = 0.0;
    for (int t = 0; t < yn[i]; ++t) {  /* each sum still runs in tap order */
      const float *row = base + t * width;
      const double wt = w[t];
      for (int64_t k = 0; k < width; ++k) sums[k] += row[k] * wt;
    }
    for (int64_t k = 0; k < width; ++k) mixed[k] = (float)sums[k];
    store_row(mixed, out_w, channels, dst + i * dst_row_stride, dst_type, dst_col_stride);
  }
  free(temp);
  free(sums);
  return 0;
}
