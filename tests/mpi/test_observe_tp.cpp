// Tensor observation under tensor parallelism (tp = the world size; core/observe.h): with
// sequence parallelism the residual observations are this rank's sequence shard [s/tp, b, h]
// with tp_shard_dim 0, without it the full [s, b, h] with no shard dim; output_logits is this
// rank's vocabulary shard [s, b, v/tp] with tp_shard_dim 2 either way; gathered along their shard
// dims the observations equal the single-process model's (same init, no dropout).
// Reference: megatron/core/tensor_observation.py (dims of the residual and logits sites).
#include <cmath>
#include <map>
#include <string>

#include "core/observe.h"
#include "models/gpt/gpt_model.h"
#include "mpi_test_helpers.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tensor_parallel.h"

namespace strata {
namespace {

ProcessGroup observe_world_tp() {
  static std::shared_ptr<Communicator> comm = make_mpi_world_communicator();
  std::vector<int> ranks(static_cast<size_t>(comm->size()));
  for (int i = 0; i < comm->size(); ++i) ranks[static_cast<size_t>(i)] = i;
  return ProcessGroup("tp", ranks, comm->rank(), comm);
}

struct Recorded {
  Tensor tensor;
  std::optional<int> tp, seq, batch;
};
struct TpRecorder : Observer {
  std::map<std::string, Recorded> seen;  // "<owner>.<name>"
  void on_tensor(const Observation& o) override {
    seen[std::string(o.owner) + "." + std::string(o.name)] = {o.tensor.clone(), o.tp_shard_dim, o.sequence_dim,
                                                              o.batch_dim};
  }
};

constexpr int64_t kB = 2, kS = 16, kH = 32, kVocab = 120, kPadded = 128;

ModelConfig observe_config() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = kH;
  m.num_attention_heads = 4;
  m.vocab_size = kVocab;
  m.make_vocab_size_divisible_by = 16;  // 128 at tp 1, 2 and 4
  m.seq_length = kS;
  m.add_bias_linear = true;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  return m;
}

std::map<std::string, Recorded> observe_forward(const ParallelGroups& g, bool sp) {
  GPTModelOptions o;
  o.dtype = DType::F32;
  o.seed = 99;
  o.global_batch_size = kB;
  o.sequence_parallel = sp;
  GPTModel model(observe_config(), o, g);
  model.init_parameters(99);
  Batch b;
  std::vector<int64_t> tok(kB * kS), lab(kB * kS);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int64_t>((i * 37 + 5) % kVocab), lab[i] = tok[(i + 1) % tok.size()];
  b.tokens = Tensor::from_data(tok, Shape{kB, kS});
  b.labels = Tensor::from_data(lab, Shape{kB, kS});
  b.loss_mask = Tensor::full({kB, kS}, 1.0, DType::F32);
  TpRecorder rec;
  {
    CaptureScope scope(rec, {SourceKind::ResidualAccumulator, SourceKind::ResidualContribution, SourceKind::OutputLogits});
    auto ctx = model.make_context(1, 0, /*training=*/false);
    model.forward_pass(*ctx, b);
  }
  return rec.seen;
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double m = 0;
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

void check_tp_observations(bool sp) {
  ParallelGroups g;
  g.tp = observe_world_tp();
  g.world_size = g.tp.size();
  g.global_rank = g.tp.rank();
  const int64_t tp = g.tp.size();
  const auto single = observe_forward(ParallelGroups::single_process(), false);
  const auto par = observe_forward(g, sp);
  REQUIRE(par.size() == 5);  // 2 layers × accumulator and contribution, the logits
  for (const std::string layer : {"decoder.layers.0", "decoder.layers.1"}) {
    for (const std::string name : {".residual_accumulator", ".residual_contribution"}) {
      INFO(layer + name << " sp " << sp);
      const Recorded& r = par.at(layer + name);
      CHECK(r.tensor.shape() == Shape{sp ? kS / tp : kS, kB, kH});
      CHECK(r.tp == (sp ? std::optional<int>(0) : std::nullopt));
      CHECK(r.seq == 0);
      CHECK(r.batch == 1);
      const Tensor full = sp ? tp::gather_dim0(r.tensor.contiguous(), g.tp) : r.tensor;
      CHECK(max_diff(full, single.at(layer + name).tensor) <= 1e-5);
    }
  }
  const Recorded& logits = par.at("output_layer.output_logits");
  CHECK(logits.tensor.shape() == Shape{kS, kB, kPadded / tp});
  CHECK(logits.tp == 2);
  CHECK(logits.seq == 0);
  CHECK(logits.batch == 1);
  const Tensor gathered = tp::gather_dim0(logits.tensor.permute({2, 0, 1}), g.tp).permute({1, 2, 0});
  CHECK(max_diff(gathered, single.at("output_layer.output_logits").tensor) <= 1e-4);
}

TEST_CASE("observe under tp: residuals without sequence parallelism are full, logits the vocab shard", "[tp][tp4]") {
  check_tp_observations(false);
}
TEST_CASE("observe under tp+sp: residuals are the sequence shard (tp_shard_dim 0), logits the vocab shard",
          "[tp][tp4]") {
  check_tp_observations(true);
}

}  // namespace
}  // namespace strata
