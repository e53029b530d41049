// The registry list of Strata's extra metrics and the chunked host reader (strata_metric_defs.h).
#include "training/observability/tensor_metrics/strata_metrics.h"

#include <algorithm>

#include "training/observability/tensor_metrics/strata_metric_defs.h"

namespace strata::tensor_metrics {

void for_each_host_rows(const Tensor& t, int64_t row_len, const std::function<void(const double*, int64_t)>& fn) {
  if (row_len <= 0 || t.numel() == 0) return;
  const int64_t rows = t.numel() / row_len;
  const Tensor flat = t.contiguous().reshape({rows, row_len});
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / row_len);
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r);
    const std::vector<double> x = host_accumulation_copy(flat.narrow(0, r, n)).to_vector();
    fn(x.data(), n);
  }
}

std::vector<MetricFactory> strata_extra_metric_factories() {
  return {
      {"layer-residual-rms", "per layer: root mean square of the residual stream entering it", make_layer_residual_rms},
      {"layer-residual-max-abs", "per layer: largest |x| of the residual stream entering it",
       make_layer_residual_max_abs},
      {"layer-residual-kurtosis", "per layer: Pearson kurtosis m4/m2^2 of the residual stream's elements",
       make_layer_residual_kurtosis},
      {"global-output-logits-max", "largest output logit (padded vocabulary included)", make_global_output_logits_max},
      {"global-output-logits-entropy", "mean over tokens of the entropy of softmax(logits) over the full vocabulary",
       make_global_output_logits_entropy},
      {"global-output-z-loss", "mean over tokens of logsumexp(logits)^2", make_global_output_z_loss},
      {"layer-attention-logit-max", "per layer: largest pre-softmax attention logit (QK-clip's max logit)",
       make_layer_attention_logit_max},
      {"layer-mhc-sinkhorn-error",
       "per layer: largest |row sum - 1| and |column sum - 1| of the mHC sites' Sinkhorn-projected H_res",
       make_layer_mhc_sinkhorn_error},
      {"layer-mhc-hres-entropy", "per layer: mean normalised entropy of the rows of the mHC sites' H_res",
       make_layer_mhc_hres_entropy},
      {"layer-mhc-stream-l2", "per layer and residual stream: L2 norm of the n-stream residual entering it",
       make_layer_mhc_stream_l2},
  };
}

}  // namespace strata::tensor_metrics
