// Branch-free exp that GCC vectorizes inside `#pragma omp simd` loops, for x <= ~0 (the arguments of
// softmax probabilities and of an online log-sum-exp are s - max or s - lse). Cephes expf reduction
// and polynomial: max relative error ~2 ulp in fp32. ATen's own exp is not callable from an extension
// in vectorized form without compiling per CPU capability, which would multiply the build time.
#pragma once

#include <cmath>
#include <cstdint>

namespace masprism {

static inline float fast_expf(float x) {
  // clamp: exp(-87) ~ 1.6e-38 is the smallest normal scale (not 0; harmless in a sum of probabilities)
  x = x < -87.0f ? -87.0f : x;  // (std::fmin/fmax become libm calls: NaN semantics block inlining)
  x = x > 88.0f ? 88.0f : x;
  // round x*log2(e) to nearest by the 1.5*2^23 trick: vectorizes (floor/lrint do not, without SSE4.1)
  const float t = x * 1.44269504088896341f + 12582912.0f;
  const float kf = t - 12582912.0f;
  const int32_t ki = __builtin_bit_cast(int32_t, t) - 0x4B400000;  // k sits in t's low mantissa bits
  const float r = (x - kf * 0.693359375f) + kf * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * __builtin_bit_cast(float, (ki + 127) << 23);
}

// One clone per ISA of each hot loop below, chosen at load time (no -march=native in the build).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MASPRISM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MASPRISM_CLONES
#endif

// In place x[i] <- exp(a * x[i] - b); returns the sum of the new values.
MASPRISM_CLONES
static float exp_inplace_sum(float* x, int64_t n, float a, float b) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) {
    const float e = fast_expf(a * x[i] - b);
    x[i] = e;
    acc += e;
  }
  return acc;
}

static inline double exp_inplace_sum(double* x, int64_t n, double a, double b) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += (x[i] = std::exp(a * x[i] - b));
  return acc;
}

MASPRISM_CLONES
static float sum_of(const float* x, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += x[i];
  return acc;
}

static inline double sum_of(const double* x, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += x[i];
  return acc;
}

MASPRISM_CLONES
static float max_of(const float* x, int64_t n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

static inline double max_of(const double* x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

}  // namespace masprism
