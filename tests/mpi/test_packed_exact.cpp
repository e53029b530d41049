// The packing identity under mpirun, in float64 (ctest mpi_packed_np2): documents A|B|C packed
// into each sample, run under a layout, give every document the per-token losses (every loss
// channel) and, summed, the parameter gradients of running it alone on one rank, within 1e-10.
// Layouts: TP2 + sequence parallelism (GPT with RoPE, hybrid M*-E, GPT with MTP), CP2 with the
// all-gather, the ring, a2a and a2a+p2p (both splits of two ranks: 2 x 1 and 1 x 2) (GPT with
// RoPE and GQA) and PP2 (GPT with RoPE and GPT with MTP: the two
// stages exchange the activations and their gradients over the pipeline group). The cases and the
// alone runs: tests/unit/packed_sequence_cases.h; the single-rank identity and the router rows:
// tests/unit/test_packed_sequences.cpp.
#include "mpi_test_helpers.h"
#include "packed_sequence_cases.h"

#include <cmath>

#include "models/gpt/gpt_model.h"
#include "models/hybrid/hybrid_model.h"
#include "parallel/context_parallel.h"
#include "parallel/rank_grid.h"
#include "parallel/tensor_parallel.h"
#include "training/config/config.h"

namespace strata {
namespace {

using namespace strata::test::packed;

// This launch's groups for a parallel section (world of 2).
ParallelGroups groups_for(const std::string& parallel_yaml) {
  const StrataConfig cfg = StrataConfig::from_yaml_text(
      "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  num_layers: 2\n  hidden_size: 16\n"
      "  num_attention_heads: 4\n  seq_length: 16\n  max_position_embeddings: 16\nparallel:\n" + parallel_yaml,
      {}, "packed_exact.yaml");
  const ResolvedConfig resolved = cfg.validate(2);
  return build_parallel_groups(*resolved.parallel, mpitest::world_comm());
}

std::unique_ptr<LanguageModel> make(const ModelConfig& m, LanguageModelOptions o, const ParallelGroups& g) {
  o.dtype = DType::F64;
  std::unique_ptr<LanguageModel> model;
  if (m.hybrid_layer_pattern) model = std::make_unique<HybridModel>(m, o, g);
  else model = std::make_unique<GPTModel>(m, GPTModelOptions{o}, g);
  model->init_parameters(5);
  return model;
}

// Every document's per-token losses: `losses[c][row]` of this rank's rows (global position of
// local row i: position(i)) against the alone runs.
void check_losses(const std::vector<std::vector<double>>& losses, int64_t s_local, const AloneRuns& alone,
                  const std::vector<Doc>& docs, const std::function<int64_t(int64_t)>& position) {
  REQUIRE(losses.size() == alone.losses.front().size());
  double worst = 0;
  for (size_t c = 0; c < losses.size(); ++c)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < s_local; ++i) {
        const int64_t pos = position(i);
        for (size_t d = 0; d < docs.size(); ++d)
          if (docs[d].sample == b && pos >= docs[d].begin && pos < docs[d].begin + docs[d].length)
            worst = std::max(worst, std::fabs(losses[c][static_cast<size_t>(b * s_local + i)] -
                                              alone.losses[d][c][static_cast<size_t>(pos - docs[d].begin)]));
      }
  CHECK(worst <= 1e-10);
}

// TP2 + sequence parallelism: every tp rank holds the whole batch and its shards of the weights.
void check_tp_sp(const ModelConfig& m) {
  const std::vector<Doc> docs = documents();
  auto one = make(m, {}, ParallelGroups::single_process());
  const AloneRuns alone = run_alone(*one, docs);
  const ParallelGroups g = groups_for("  tensor_model_parallel_size: 2\n  sequence_parallel: true\n");
  LanguageModelOptions o;
  o.sequence_parallel = true;
  auto model = make(m, o, g);
  const Pass packed = run(*model, packed_batch(docs), packed_weights(docs), [&](Parameter& p) {
    return tp::gather_parameter(p, p.main_grad, p.expert_parallel ? g.expert_tp : g.tp);
  });
  check_losses(packed.losses, kSeq, alone, docs, [](int64_t i) { return i; });
  check_gradients(packed.grads, alone.grad_sum);
}

// CP2: rank r holds chunks r and 3 − r of each sample; gradients summed over cp.
// hierarchical: a2a+p2p's sizes ("[2, 1]").
void check_cp(const ModelConfig& m, const std::string& comm, const std::string& hierarchical = "") {
  INFO("cp_comm_type " << comm << " " << hierarchical);
  const std::vector<Doc> docs = documents();
  auto one = make(m, {}, ParallelGroups::single_process());
  const AloneRuns alone = run_alone(*one, docs);
  const ParallelGroups g = groups_for("  context_parallel_size: 2\n  cp_comm_type: \"" + comm + "\"\n" +
                                      (hierarchical.empty() ? ""
                                                            : "  hierarchical_context_parallel_sizes: " + hierarchical +
                                                                  "\n"));
  LanguageModelOptions o;
  for (const auto& [type, name] : kCpCommTypeNames)
    if (comm == name) o.cp_comm_type = type;
  auto model = make(m, o, g);
  const int r = g.cp.rank();
  const Batch local = cp::split_batch(packed_batch(docs), 2, r);
  const std::vector<double> w =
      cp::split_sequence(Tensor::from_vector(packed_weights(docs), {2, kSeq}, DType::F64), 1, 2, r).to_vector();
  const Pass packed = run(*model, local, w, [&](Parameter& p) {
    Tensor t = p.main_grad.clone();
    g.cp.all_reduce(t);
    return t;
  });
  const int64_t s_local = kSeq / 2;
  check_losses(packed.losses, s_local, alone, docs, [&](int64_t i) { return cp::global_position(i, s_local, 2, r); });
  check_gradients(packed.grads, alone.grad_sum);
}

// PP2: stage 0 holds the embedding and layer 0, stage 1 layer 1, the head and the MTP block.
void check_pp(ModelConfig m) {
  m.untie_embeddings_and_output_weights = true;  // no embedding-group sum to do by hand
  const std::vector<Doc> docs = documents();
  auto one = make(m, {}, ParallelGroups::single_process());
  const AloneRuns alone = run_alone(*one, docs);
  const ParallelGroups g = groups_for("  pipeline_model_parallel_size: 2\n");
  const int stage = g.pp.rank();
  LanguageModelOptions o;
  o.first_layer = stage;
  o.num_layers = 1;
  o.pre_process = stage == 0;
  o.post_process = stage == 1;
  auto model = make(m, o, g);
  for (Parameter* p : model->parameters()) p->main_grad.zero_();
  const Batch batch = packed_batch(docs);
  auto ctx = model->make_context(1, 0, true);
  const Shape hidden{kSeq, 2, m.hidden_size};
  std::vector<std::vector<double>> losses;
  if (stage == 0) {
    const ForwardOutput out = model->forward_pass(*ctx, batch);
    std::vector<PointToPoint> send = {PointToPoint::send(out.stage_output.contiguous(), 1, 0)};
    g.pp.batch_send_recv(send);
    Tensor dy = Tensor::empty(hidden, DType::F64);
    std::vector<PointToPoint> recv = {PointToPoint::recv(dy, 1, 1)};
    g.pp.batch_send_recv(recv);
    BackwardInput in;
    in.stage_output_grad = dy;
    model->backward_pass(*ctx, in);
  } else {
    ctx->input_hidden = Tensor::empty(hidden, DType::F64);
    std::vector<PointToPoint> recv = {PointToPoint::recv(ctx->input_hidden, 0, 0)};
    g.pp.batch_send_recv(recv);
    const ForwardOutput out = model->forward_pass(*ctx, batch);
    BackwardInput in;
    for (const NamedLoss& l : out.losses) {
      losses.push_back(l.value.to_vector());
      in.loss_grads.push_back(Tensor::from_vector(packed_weights(docs), l.value.shape(), DType::F64));
    }
    model->backward_pass(*ctx, in);
    std::vector<PointToPoint> send = {PointToPoint::send(ctx->input_hidden_grad.contiguous(), 0, 1)};
    g.pp.batch_send_recv(send);
    check_losses(losses, kSeq, alone, docs, [](int64_t i) { return i; });
  }
  std::map<std::string, std::vector<double>> grads;
  for (Parameter* p : model->parameters()) {
    Tensor grad = p->main_grad.clone();
    // MTP: the last stage's copy of the word embeddings adds its lookups' gradient (the trainer's
    // embedding-group sum).
    if (m.mtp_num_layers && p->name == layers::VocabEmbedding::kWordEmbeddingsName) g.pp.all_reduce(grad);
    grads[p->name] = grad.to_vector();
  }
  check_gradients(grads, alone.grad_sum);
}

}  // namespace

TEST_CASE("packed exact: TP2 + SP, GPT RoPE / hybrid M*-E / MTP, each document as if alone (f64)", "[packed2]") {
  check_tp_sp(base_config());
  check_tp_sp(hybrid_moe_config());
  check_tp_sp(mtp_config(1));
}

TEST_CASE("packed exact: CP2 all_gather, p2p, a2a and a2a+p2p, GPT RoPE, each document as if alone (f64)",
          "[packed2]") {
  check_cp(base_config(), "all_gather");
  check_cp(base_config(), "p2p");
  check_cp(base_config(), "a2a");
  check_cp(base_config(), "a2a+p2p", "[2, 1]");
  check_cp(base_config(), "a2a+p2p", "[1, 2]");
}

TEST_CASE("packed exact: PP2, GPT RoPE and MTP, each document as if alone (f64)", "[packed2]") {
  check_pp(base_config());
  check_pp(mtp_config(1));
}

}  // namespace strata
