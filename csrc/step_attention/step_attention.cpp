// CPU step attention in ONE pass per query block: O, the row LSE and the step mass from a single QK^T.
// Per block of query rows (all keys up to the block's last row, so each row's softmax is exact without
// an online rescale; the block height is bounded so the scores block is at most kScoreBudget elements):
//   1. S = Q K^T via at::bmm (MKL/oneDNN, parallel inside ATen), GQA without copying K (the query heads
//      of a KV group are stacked along rows);
//   2. per row and head, fused and vectorized: max, then p = exp(scale * (s - max)) written in place with
//      its row sum l (so lse = scale * max + log l), then the per-key-step sums of p / l added to the
//      row's step-mass buffer; keys after the row (causal) are zeroed;
//   3. O = P V via at::bmm, divided by l.
// Compared with "SDPA for O + a second pass for the mass" this saves one QK^T GEMM and all exp work
// of the second pass (measured in benchmarks/results/).
//
// Parallelism (ATen's OpenMP backend, at::parallel_for): GEMMs are parallel inside ATen; step 2 is
// parallel over the block's rows. Each row writes only its own row of a [rows, n] buffer and rows are
// added into the (query step, key step) matrix serially in row order, so the result does not depend
// on the number of threads (deterministic ownership, no atomics). Accumulation: fp32 exp/sums within a
// row's key runs, fp64 for the step mass totals; fp64 inputs are computed in fp64 throughout.
//
// Keys are walked as maximal runs of equal step id (precomputed per sequence), so the per-step
// reduction is a contiguous vectorized sum; 1-token steps and non-contiguous ids are handled alike.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <Python.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "fast_math.h"

#ifndef MASPRISM_SCORE_BUDGET_LOG2
#define MASPRISM_SCORE_BUDGET_LOG2 22  // 4M elements = 16 MiB fp32 per scores block
#endif

namespace masprism {
namespace {

constexpr int64_t kScoreBudget = int64_t(1) << MASPRISM_SCORE_BUDGET_LOG2;  // elements of one scores block (bounded memory)

struct Run {
  int64_t start, end, step;  // keys [start, end) all in `step` (n = outside every step)
};

std::vector<Run> key_runs(const int32_t* sid, int64_t len, int64_t n) {
  std::vector<Run> runs;
  for (int64_t u = 0; u < len;) {
    const int64_t st = sid[u] >= 0 ? sid[u] : n;
    int64_t v = u + 1;
    while (v < len && (sid[v] >= 0 ? sid[v] : n) == st) ++v;
    if (st != n) runs.push_back({u, v, st});
    u = v;
  }
  return runs;
}

// Layout (no copy per sequence or block, issue 33 item 4): qp = Q as [Hk, T, G, D] (one permuted copy per
// pack), so a block's queries are the view [Hk, rows * G, D], row r * G + g = (token r, head hk * G + g);
// K and V are read through strided views of the caller's [T, Hk, D] tensors (BLAS takes the leading
// dimension Hk * D); O is written in place into op [Hk, T, G, D], permuted into [T, Hq, D] once per pack.
template <typename scalar_t>
void attend_one_sequence(const at::Tensor& qp, const at::Tensor& k, const at::Tensor& v, const int32_t* sid,
                         int64_t s, int64_t L, int64_t n, double scale, at::Tensor& op, at::Tensor& lse,
                         scalar_t* mass_b, int64_t n_max) {
  const int64_t Hk = qp.size(0), T = qp.size(1), G = qp.size(2), D = qp.size(3), Hq = Hk * G;
  const at::Tensor kt = k.slice(0, s, s + L).permute({1, 2, 0});  // [Hk, D, L] view
  const at::Tensor vc = v.slice(0, s, s + L).transpose(0, 1);      // [Hk, L, D] view
  const std::vector<Run> runs = n > 0 ? key_runs(sid, L, n) : std::vector<Run>{};
  const int64_t bq = std::max<int64_t>(16, std::min<int64_t>(256, kScoreBudget / std::max<int64_t>(1, Hq * L)));
  std::vector<double> acc(n * n, 0.0);
  // one scores buffer for all blocks of the sequence: a fresh multi-MB allocation per block would be
  // mmapped and page-faulted (zeroed by the kernel) every time
  at::Tensor s_buf = at::empty({Hq * bq * L}, qp.options());
  scalar_t* lse_p = lse.data_ptr<scalar_t>();
  const scalar_t sc = static_cast<scalar_t>(scale);
  for (int64_t a = 0; a < L; a += bq) {
    const int64_t b = std::min(a + bq, L), rows = b - a;
    const at::Tensor qg = qp.slice(1, s + a, s + b).view({Hk, rows * G, D});
    at::Tensor S = s_buf.narrow(0, 0, Hq * rows * b).view({Hk, rows * G, b});  // (hk, r*G + g, u)
    at::bmm_out(S, qg, kt.narrow(2, 0, b));
    scalar_t* Sp = S.data_ptr<scalar_t>();
    at::Tensor inv_l = at::empty({Hq * rows}, S.options());
    scalar_t* inv_lp = inv_l.data_ptr<scalar_t>();
    std::vector<double> rowbuf(rows * n, 0.0);
    at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t t = a + r, len = t + 1;  // causal: keys 0..t
        const bool in_step = n > 0 && sid[t] >= 0;
        double* out = rowbuf.data() + r * n;
        for (int64_t h = 0; h < Hq; ++h) {
          const int64_t row = (h / G * rows + r) * G + h % G;  // (hk, r*G + g)
          scalar_t* x = Sp + row * b;
          const scalar_t m = max_of(x, len);
          const scalar_t l = exp_inplace_sum(x, len, sc, sc * m);
          std::fill(x + len, x + b, scalar_t(0));
          lse_p[h * T + s + t] = sc * m + std::log(l);
          inv_lp[row] = scalar_t(1) / l;
          if (!in_step) continue;
          const double inv = 1.0 / static_cast<double>(l);
          for (const Run& run : runs) {
            if (run.start > t) break;
            out[run.step] += inv * static_cast<double>(sum_of(x + run.start, std::min(run.end, len) - run.start));
          }
        }
      }
    });
    at::Tensor ob = op.slice(1, s + a, s + b).view({Hk, rows * G, D});
    at::mul_out(ob, at::bmm(S, vc.narrow(1, 0, b)), inv_l.view({Hk, rows * G, 1}));
    for (int64_t r = 0; r < rows && n > 0; ++r) {  // fixed order: independent of the thread count
      if (sid[a + r] < 0) continue;
      double* dst = acc.data() + sid[a + r] * n;
      const double* src = rowbuf.data() + r * n;
      for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
    }
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) mass_b[i * n_max + j] = static_cast<scalar_t>(acc[i * n + j] / Hq);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> step_attention_cpu(const at::Tensor& q_in, const at::Tensor& k_in,
                                                                  const at::Tensor& v_in, const at::Tensor& cu_seqlens,
                                                                  const at::Tensor& step_ids, const at::Tensor& n_steps,
                                                                  double scale, int64_t n_max) {
  TORCH_CHECK(q_in.dim() == 3 && k_in.dim() == 3 && v_in.sizes() == k_in.sizes(), "q [T,Hq,D], k/v [T,Hk,D]");
  TORCH_CHECK(q_in.size(1) % k_in.size(1) == 0, "Hq must be a multiple of Hk");
  TORCH_CHECK(q_in.scalar_type() == k_in.scalar_type() && k_in.scalar_type() == v_in.scalar_type(), "q/k/v dtypes differ");
  const auto cdt = q_in.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  // k/v may be strided views (the model passes slices of one qkv tensor): only cast, never copied
  const at::Tensor k = k_in.to(cdt), v = v_in.to(cdt);
  const int64_t T = q_in.size(0), Hq = q_in.size(1), Hk = k.size(1), G = Hq / Hk, D = q_in.size(2);
  const int64_t B = cu_seqlens.numel() - 1;
  // q: any token stride (a view of the model's qkv tensor) as long as heads and head dim are dense
  const at::Tensor qd = q_in.stride(2) == 1 && q_in.stride(1) == D ? q_in : q_in.contiguous();
  const at::Tensor qp = qd.to(cdt).view({T, Hk, G, D}).permute({1, 0, 2, 3}).contiguous();  // [Hk, T, G, D]
  const at::Tensor cu = cu_seqlens.to(at::kLong).contiguous(), ns = n_steps.to(at::kLong).contiguous();
  const at::Tensor sid_t = step_ids.to(at::kInt).contiguous();
  const int64_t* cu_p = cu.data_ptr<int64_t>();
  const int64_t* ns_p = ns.data_ptr<int64_t>();
  at::Tensor op = at::empty({Hk, T, G, D}, qp.options());
  at::Tensor lse = at::empty({Hq, T}, qp.options());
  at::Tensor mass = at::zeros({B, n_max, n_max}, qp.options());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = cu_p[b], L = cu_p[b + 1] - s;
    TORCH_CHECK(L >= 0 && ns_p[b] <= n_max, "bad cu_seqlens or n_steps > n_max");
    if (L == 0) continue;
    AT_DISPATCH_FLOATING_TYPES(qp.scalar_type(), "masprism_step_attention", [&] {
      attend_one_sequence<scalar_t>(qp, k, v, sid_t.data_ptr<int32_t>() + s, s, L, ns_p[b], scale, op, lse,
                                    mass.data_ptr<scalar_t>() + b * n_max * n_max, n_max);
    });
  }
  at::Tensor o = at::empty_like(q_in, at::MemoryFormat::Contiguous);
  o.view({T, Hk, G, D}).copy_(op.permute({1, 0, 2, 3}));  // the pack's one output copy (and cast back)
  return {o, lse, mass};
}

}  // namespace

TORCH_LIBRARY(masprism, m) {
  m.def("step_attention(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens, Tensor step_ids, Tensor n_steps, "
        "float scale, int n_max) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(masprism, CPU, m) { m.impl("step_attention", &step_attention_cpu); }

}  // namespace masprism

// `import masprism_batch._C` loads this library, which registers the ops above as torch.ops.masprism.*.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&def);
}
