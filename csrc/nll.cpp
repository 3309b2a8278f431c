// CPU fused LM head + cross-entropy -> per-token NLL (fp32 out), never forming T x V logits.
// Tokens in chunks, vocabulary in tiles: logits tile = at::mm (MKL GEMM, parallel inside ATen), then one
// fused pass per row (parallel over rows with at::parallel_for, ATen's OpenMP backend) updates the online
// log-sum-exp: running max and rescaled running sum, with a vectorized fast exp. Each row is owned by one
// thread, so the result does not depend on the thread count.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fast_math.h"

namespace masprism {
namespace {

constexpr int64_t kVocabTile = 4096;

template <typename scalar_t>
void nll_chunk(const at::Tensor& h, const at::Tensor& w, const int64_t* tgt, int64_t ignore_index, float* out) {
  const int64_t rows = h.size(0), V = w.size(0);
  std::vector<scalar_t> m(rows, -std::numeric_limits<scalar_t>::infinity()), ssum(rows, 0), picked(rows, 0);
  for (int64_t v0 = 0; v0 < V; v0 += kVocabTile) {
    const int64_t v1 = std::min(v0 + kVocabTile, V), nv = v1 - v0;
    const at::Tensor logits = at::mm(h, w.slice(0, v0, v1).t()).contiguous();  // [rows, nv]
    const scalar_t* lp = logits.data_ptr<scalar_t>();
    at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const scalar_t* x = lp + r * nv;
        const scalar_t m_new = std::max(m[r], max_of(x, nv));
        // exp(x - m_new) summed; the old sum rescaled by exp(m_old - m_new) (0 on the first tile)
        ssum[r] = ssum[r] * std::exp(m[r] - m_new) + sum_exp_affine(x, nv, scalar_t(1), m_new);
        m[r] = m_new;
        if (tgt[r] >= v0 && tgt[r] < v1) picked[r] = x[tgt[r] - v0];
      }
    });
  }
  for (int64_t r = 0; r < rows; ++r)
    out[r] = tgt[r] == ignore_index ? std::numeric_limits<float>::quiet_NaN()
                                    : static_cast<float>(m[r] + std::log(ssum[r]) - picked[r]);
}

at::Tensor token_nll_cpu(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                         int64_t ignore_index, int64_t chunk) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1), "hidden [T,d], weight [V,d]");
  TORCH_CHECK(targets.numel() == hidden.size(0), "targets must be [T]");
  TORCH_CHECK(chunk > 0, "chunk must be positive");
  const auto cdt = hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  // bf16/fp16 weights are converted once here (V x d fp32): ATen has no bf16 x bf16 -> fp32 GEMM on CPU.
  const at::Tensor w = weight.to(cdt).contiguous();
  const at::Tensor tg = targets.to(at::kLong).contiguous();
  const int64_t T = hidden.size(0);
  at::Tensor out = at::empty({T}, hidden.options().dtype(at::kFloat));
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int64_t c1 = std::min(c0 + chunk, T);
    const at::Tensor h = hidden.slice(0, c0, c1).to(cdt).contiguous();
    AT_DISPATCH_FLOATING_TYPES(cdt, "masprism_token_nll", [&] {
      nll_chunk<scalar_t>(h, w, tg.data_ptr<int64_t>() + c0, ignore_index, out.data_ptr<float>() + c0);
    });
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(masprism, CPU, m) { m.impl("token_nll", &token_nll_cpu); }

}  // namespace masprism
