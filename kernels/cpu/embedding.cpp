// CPU embedding lookup and weight gradient (kernels/embedding.h): the readable reference.
// Backward is a stable counting sort of positions by id followed by one sequential, position-ordered
// sum per weight row — the same order the CUDA kernel uses, so the two agree to rounding of the
// final store. Reference: Megatron-Core VocabParallelEmbedding, llm.c encoder_backward.
#include <vector>

#include "kernels/embedding.h"

namespace strata::kernels::cpu {
namespace {
template <typename F>
decltype(auto) dispatch_ids(const Tensor& ids, F&& f) {
  if (ids.dtype() == DType::I64) return f(static_cast<const int64_t*>(ids.data_ptr()));
  return f(static_cast<const int32_t*>(ids.data_ptr()));
}

// Rejects ids outside [0, vocab_size_global) (the upper bound only when vocab_size_global > 0).
template <typename I>
void check_id_range(const char* op, const I* ids, int64_t n, int64_t vocab_size_global) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = static_cast<int64_t>(ids[i]);
    STRATA_CHECK(id >= 0, op, ": ids[", i, "] = ", id, " is negative");
    STRATA_CHECK(vocab_size_global == 0 || id < vocab_size_global, op, ": ids[", i, "] = ", id,
                 " is outside the vocabulary [0, ", vocab_size_global, ")");
  }
}
}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& weight, const Tensor& out, int64_t vocab_start,
                       int64_t vocab_size_global) {
  const int64_t n = ids.numel(), v = weight.size(0), h = weight.size(1);
  dispatch_ids(ids, [&](const auto* idp) {
    check_id_range("embedding_forward", idp, n, vocab_size_global);
    dispatch_float(weight.dtype(), "embedding_forward", [&](auto tag_) {
      STRATA_SCALAR(tag_);
      const scalar_t* wp = static_cast<const scalar_t*>(weight.data_ptr());
      scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
#pragma omp parallel for if (n * h > 32768)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = static_cast<int64_t>(idp[i]) - vocab_start;
        scalar_t* dst = op + i * h;
        if (r >= 0 && r < v) {
          const scalar_t* src = wp + r * h;
          for (int64_t j = 0; j < h; ++j) dst[j] = src[j];
        } else {
          for (int64_t j = 0; j < h; ++j) dst[j] = convert<scalar_t>(0.0f);
        }
      }
    });
  });
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dweight, bool accumulate,
                        int64_t vocab_start) {
  const int64_t n = ids.numel(), v = dweight.size(0), h = dweight.size(1);
  // Stable counting sort: positions of local row r are order[start[r] .. start[r+1]) ascending.
  std::vector<int64_t> start(v + 1, 0), order;
  dispatch_ids(ids, [&](const auto* idp) {
    check_id_range("embedding_backward", idp, n, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = static_cast<int64_t>(idp[i]) - vocab_start;
      if (r >= 0 && r < v) ++start[r + 1];
    }
    for (int64_t r = 0; r < v; ++r) start[r + 1] += start[r];
    order.resize(start[v]);
    std::vector<int64_t> cursor(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = static_cast<int64_t>(idp[i]) - vocab_start;
      if (r >= 0 && r < v) order[cursor[r]++] = i;
    }
  });
  dispatch_float(dweight.dtype(), "embedding_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const scalar_t* gp = static_cast<const scalar_t*>(dout.data_ptr());
    scalar_t* wp = static_cast<scalar_t*>(dweight.data_ptr());
#pragma omp parallel if (v * h > 32768)
    {
      std::vector<acc> sum(h);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < v; ++r) {
        scalar_t* dst = wp + r * h;
        if (start[r] == start[r + 1]) {
          if (!accumulate)
            for (int64_t j = 0; j < h; ++j) dst[j] = convert<scalar_t>(0.0f);
          continue;
        }
        std::fill(sum.begin(), sum.end(), acc(0));
        for (int64_t k = start[r]; k < start[r + 1]; ++k) {
          const scalar_t* src = gp + order[k] * h;
          for (int64_t j = 0; j < h; ++j) sum[j] += convert<acc>(src[j]);
        }
        for (int64_t j = 0; j < h; ++j)
          dst[j] = convert<scalar_t>(accumulate ? convert<acc>(dst[j]) + sum[j] : sum[j]);
      }
    }
  });
}

}  // namespace strata::kernels::cpu
