// The tensor dumper (training/observability/tensor_dumper.h, tensor_dump_sites.h): glob matching over site
// names; the kinds the patterns can reach (a residual pattern does not turn on router_scores);
// the logging.tensor_dump_* config errors, each naming its field; a tiny MoE training run dumps
// the chosen iterations only, with exactly the matching keys (training and evaluation forwards),
// the values bit-equal to what a recording observer saw, the dims in the metadata; files are
// replaced atomically and keep the observed dtype (bf16 stays bf16).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/formats/safetensors.h"
#include "formats_test_helpers.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/batch_source.h"
#include "training/config/model_factory.h"
#include "training/observability/tensor_dump_sites.h"
#include "training/observability/tensor_dumper.h"
#include "training/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

TEST_CASE("tensor dump: glob matching of site names", "[observe][tensor_dump]") {
  CHECK(glob_match("decoder.layers.*.residual_contribution", "decoder.layers.3.residual_contribution"));
  CHECK(glob_match("decoder.layers.*.residual_contribution", "decoder.layers.12.residual_contribution"));
  CHECK_FALSE(glob_match("decoder.layers.*.residual_contribution", "decoder.layers.3.residual_accumulator"));
  CHECK(glob_match("decoder.layers.?.mlp.router.router_logits", "decoder.layers.3.mlp.router.router_logits"));
  CHECK_FALSE(glob_match("decoder.layers.?.mlp.router.router_logits", "decoder.layers.13.mlp.router.router_logits"));
  CHECK(glob_match("*", ""));
  CHECK(glob_match("*", "output_layer.output_logits"));
  CHECK(glob_match("*logits", "output_layer.output_logits"));
  CHECK(glob_match("*.router_*", "decoder.layers.1.mlp.router.router_top_kept"));
  CHECK(glob_match("a*b*c", "aXbYbZc"));
  CHECK_FALSE(glob_match("a*b*c", "aXbYbZ"));
  CHECK_FALSE(glob_match("output_layer", "output_layer.output_logits"));  // whole names only
  CHECK_FALSE(glob_match("?", ""));
  CHECK(glob_match("**?", "x"));
}

ResolvedModelConfig moe_config() {
  const ResolvedConfig c =
      test::tiny_config({"model.num_layers=3", "model.hidden_size=16", "model.num_attention_heads=4",
                         "model.vocab_size=50", "model.add_bias_linear=false", "model.num_experts=4",
                         "model.moe_ffn_hidden_size=16", "model.moe_layer_freq=[0, 1, 1]"});
  return c.model;
}

TEST_CASE("tensor dump: the model's site names and the kinds patterns reach", "[observe][tensor_dump]") {
  const ResolvedModelConfig m = moe_config();
  const std::vector<std::string> sites = model_site_names(m);
  // residuals and the attention logit max of 3 layers, 8 router sites on layers 1 and 2, logits
  CHECK(sites.size() == 3 * 3 + 2 * 8 + 1);
  CHECK(sites.front() == "decoder.layers.0.residual_accumulator");
  CHECK(std::count(sites.begin(), sites.end(), "decoder.layers.2.mlp.router.router_scores") == 1);
  CHECK(std::count(sites.begin(), sites.end(), "decoder.layers.0.mlp.router.router_scores") == 0);  // dense layer
  CHECK(sites.back() == "output_layer.output_logits");
  using K = SourceKind;
  CHECK(site_kinds({"decoder.layers.*.residual_contribution"}, m) == SourceKinds{K::ResidualContribution});
  CHECK(site_kinds({"decoder.layers.1.mlp.router.router_scores"}, m) == SourceKinds{K::RouterScores});
  CHECK(site_kinds({"decoder.layers.0.mlp.router.*"}, m) == SourceKinds{});  // layer 0 is dense
  CHECK(site_kinds({"output_layer.*", "*.router_logits"}, m) == SourceKinds{K::OutputLogits, K::RouterLogits});
  CHECK(site_kinds({"*top*"}, m) == SourceKinds{K::RouterTopkProbs, K::RouterTopIndices, K::RouterTopKept});
  SourceKinds all_but_mtp;  // a model without MTP heads or mHC: mtp_logits and mhc_* have no site
  for (int i = 0; i < kNumSourceKinds; ++i)
    if (static_cast<SourceKind>(i) != K::MtpLogits &&
        std::string(source_kind_name(static_cast<SourceKind>(i))).rfind("mhc_", 0) != 0)
      all_but_mtp = all_but_mtp | SourceKinds{static_cast<SourceKind>(i)};
  CHECK(site_kinds({"*"}, m) == all_but_mtp);
  CHECK(site_kinds({"output_layer.mtp_logits.*"}, m) == SourceKinds{});
  CHECK(tensor_dump_path("d", 12, 3) == "d/iter_0000012/rank_0003.safetensors");
}

void check_config_error(const std::vector<std::string>& extra, const std::string& field, const std::string& text) {
  INFO(field << ": " << text);
  std::vector<std::string> o = {"model.num_experts=4", "model.moe_ffn_hidden_size=16", "model.add_bias_linear=false"};
  o.insert(o.end(), extra.begin(), extra.end());
  try {
    test::tiny_config(o);
    FAIL("no error");
  } catch (const config::ConfigError& e) {
    CHECK(e.field() == field);
    CHECK_THAT(e.what(), Catch::Contains(text));
  }
}

TEST_CASE("tensor dump: config errors name the field", "[observe][tensor_dump]") {
  check_config_error({"logging.tensor_dump_iters=[1]"}, "logging.tensor_dump_iters", "needs logging.tensor_dump_sites");
  check_config_error({"logging.tensor_dump_dir=/tmp/x"}, "logging.tensor_dump_dir", "needs logging.tensor_dump_sites");
  check_config_error({"logging.tensor_dump_sites=[output_layer.output_logits]"}, "logging.tensor_dump_iters",
                     "required with logging.tensor_dump_sites");
  check_config_error({"logging.tensor_dump_sites=[output_layer.output_logits]", "logging.tensor_dump_iters=[0, -1]"},
                     "logging.tensor_dump_iters", "");
  check_config_error({"logging.tensor_dump_sites=[output_layer.output_logits]", "logging.tensor_dump_iters=[21]"},
                     "logging.tensor_dump_iters", "iteration 21 is never reached (training.train_iters 20)");
  check_config_error({"logging.tensor_dump_sites=['*.router_logits', '']", "logging.tensor_dump_iters=[0]"},
                     "logging.tensor_dump_sites", "pattern 1 is empty");
  check_config_error({"logging.tensor_dump_sites=[decoder.layer.*]", "logging.tensor_dump_iters=[0]"},
                     "logging.tensor_dump_sites", "pattern 'decoder.layer.*' matches no site of this model");
  // Valid: the last evaluation runs at train_iters.
  const ResolvedConfig ok = test::tiny_config({"logging.tensor_dump_sites=['decoder.layers.*']",
                                               "logging.tensor_dump_iters=[0, 20]"});
  CHECK(tensor_dump_dir(ok) == "tensor_dump");
}

// Records (cloned) every tensor of the due iterations, keyed as the dumper keys them.
struct KeyedRecorder : StepObserver {
  std::set<int64_t> due;
  std::map<std::string, Tensor> seen;
  int64_t eval_offset = 0, eval_iteration = -1, eval_max = 0;
  SourceKinds kinds_for(const ObservationContext& c) override {
    if (c.phase == ObservationPhase::Eval && c.iteration != eval_iteration) eval_iteration = c.iteration, eval_offset = 0;
    return due.count(c.iteration) ? SourceKinds::all() : SourceKinds{};
  }
  void on_tensor(const Observation& o) override {
    const ObservationContext& c = observation_context();
    std::string site = std::string(o.owner) + "." + std::string(o.name);
    std::string key = "i" + std::to_string(c.iteration) + "/";
    if (c.phase == ObservationPhase::Eval) {
      key += "eval/" + site + "/mb" + std::to_string(eval_offset + c.micro_batch);
      eval_max = std::max(eval_max, c.micro_batch + 1);
    } else {
      key += site + "/mb" + std::to_string(c.micro_batch);
    }
    seen.emplace(key, o.tensor.clone());
  }
  void end_step(const ObservationContext& c) override {
    if (c.phase == ObservationPhase::Eval) eval_offset += eval_max;
    eval_max = 0;
  }
};

TEST_CASE("tensor dump: a tiny MoE run dumps the chosen iterations with the matching keys and values",
          "[observe][tensor_dump]") {
  test::TempDir dir("tensor_dump_run");
  const std::string out = (dir.path() / "dump").string();
  const ResolvedConfig cfg = test::tiny_config(
      {"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4", "model.vocab_size=50",
       "model.make_vocab_size_divisible_by=8", "model.add_bias_linear=false", "model.num_experts=4",
       "model.moe_ffn_hidden_size=16", "model.moe_router_topk=2", "model.moe_layer_freq=[0, 1]",
       "training.train_iters=4", "training.micro_batch_size=2", "training.global_batch_size=4",
       "training.eval_interval=2", "training.eval_iters=2",
       "logging.tensor_dump_sites=['decoder.layers.*.residual_contribution', "
       "'decoder.layers.1.mlp.router.router_logits', 'output_layer.output_logits']",
       "logging.tensor_dump_iters=[0, 2]", "logging.tensor_dump_dir=" + out});
  auto model = make_model(cfg, Device::cpu());
  MockBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
  MockBatchSource valid(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 2);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, *model, train, &valid, opt);
  std::unique_ptr<TensorDumper> owned = TensorDumper::from_config(cfg, 0);
  REQUIRE(owned);
  TensorDumper& dumper = *owned;
  // Only the kinds the patterns name: no router_scores, no accumulator.
  CHECK(dumper.kinds_for(ObservationContext{0, 0, 0, ObservationPhase::Train}) ==
        SourceKinds({SourceKind::ResidualContribution, SourceKind::RouterLogits, SourceKind::OutputLogits}));
  CHECK(dumper.kinds_for(ObservationContext{1, 0, 0, ObservationPhase::Train}) == SourceKinds{});
  dumper.finish();
  KeyedRecorder rec;
  rec.due = {0, 2};
  trainer.observers().add(std::move(owned));
  trainer.observers().add(rec);
  trainer.train();

  // Files for iterations 0 and 2 only (rank 0).
  std::set<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) files.insert(fs::relative(e.path(), out).string());
  CHECK(files == std::set<std::string>{"iter_0000000/rank_0000.safetensors", "iter_0000002/rank_0000.safetensors"});

  const std::vector<std::string> sites = {"decoder.layers.0.residual_contribution",
                                          "decoder.layers.1.residual_contribution",
                                          "decoder.layers.1.mlp.router.router_logits", "output_layer.output_logits"};
  for (int64_t it : {0, 2}) {
    INFO("iteration " << it);
    const formats::SafetensorsContents f = formats::read_safetensors(tensor_dump_path(out, it, 0));
    std::set<std::string> want;
    for (const std::string& s : sites)
      for (int mb = 0; mb < 2; ++mb) want.insert(s + "/mb" + std::to_string(mb));
    if (it == 2)  // the evaluation at iteration 2: eval_iters 2 × 2 micro-batches
      for (const std::string& s : sites)
        for (int n = 0; n < 4; ++n) want.insert("eval/" + s + "/mb" + std::to_string(n));
    std::set<std::string> keys;
    for (const auto& [k, t] : f.tensors) keys.insert(k);
    CHECK(keys == want);
    for (const auto& [k, t] : f.tensors) {
      INFO(k);
      const auto r = rec.seen.find("i" + std::to_string(it) + "/" + k);
      REQUIRE(r != rec.seen.end());
      CHECK(same_bits(t, r->second));
      const nlohmann::json m = nlohmann::json::parse(f.metadata.at(k));
      CHECK(m.at("sequence_dim") == 0);
      CHECK(m.at("batch_dim") == 1);
      const bool logits = k.find("output_logits") != std::string::npos;
      CHECK(m.at("tp_shard_dim") == (logits ? nlohmann::json(2) : nlohmann::json(nullptr)));  // tp 1, no sp
      CHECK(m.at("phase") == (k.rfind("eval/", 0) == 0 ? "eval" : "train"));
      CHECK(t.shape()[0] == cfg.model->seq_length);
      CHECK(t.shape()[1] == 2);
    }
    CHECK(f.metadata.at("iteration") == std::to_string(it));
    CHECK(f.metadata.at("rank") == "0");
  }
  CHECK(dumper.written() == std::vector<std::string>{tensor_dump_path(out, 0, 0), tensor_dump_path(out, 2, 0)});
}

TEST_CASE("tensor dump: files are replaced atomically and keep the observed dtype", "[observe][tensor_dump]") {
  test::TempDir dir("tensor_dump_atomic");
  TensorDumpOptions o;
  o.patterns = {"output_layer.*"};
  o.iterations = {5};
  o.kinds = {SourceKind::OutputLogits};
  o.dir = dir.path().string();
  o.rank = 3;
  TensorDumper dumper(o);
  RunObservers observers;
  observers.add(dumper);
  const Tensor first = test::random_tensor({4, 1, 3}, 11).to(DType::BF16);
  const Tensor second = test::random_tensor({4, 1, 3}, 12).to(DType::BF16);
  for (const Tensor* t : {&first, &second}) {  // the second pass replaces the first file
    RunObservers::Step step(observers, ObservationContext{5, 0, 0, ObservationPhase::Train});
    observe("output_layer", "output_logits", SourceKind::OutputLogits, *t, 2, 0, 1);
    observe("decoder.layers.0", "residual_contribution", SourceKind::ResidualContribution, *t, 0, 0, 1);  // not asked
  }
  const std::string path = tensor_dump_path(o.dir, 5, 3);
  CHECK(path == o.dir + "/iter_0000005/rank_0003.safetensors");
  const formats::SafetensorsContents f = formats::read_safetensors(path);
  REQUIRE(f.tensors.size() == 1);
  const Tensor& t = f.tensors.at("output_layer.output_logits/mb0");
  CHECK(t.dtype() == DType::BF16);
  CHECK(same_bits(t, second));
  CHECK(nlohmann::json::parse(f.metadata.at("output_layer.output_logits/mb0")).at("tp_shard_dim") == 2);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(fs::path(path).parent_path())) ++entries;
  CHECK(entries == 1);  // no temporary left behind
}

TEST_CASE("tensor dump: keys under virtual pipelining carry the chunk, eval forwards are numbered across steps",
          "[observe][tensor_dump]") {
  test::TempDir dir("tensor_dump_keys");
  TensorDumpOptions o;
  o.patterns = {"decoder.layers.?.residual_accumulator"};
  o.iterations = {7};
  o.kinds = {SourceKind::ResidualAccumulator};
  o.dir = dir.path().string();
  o.chunk_keys = true;
  TensorDumper dumper(o);
  RunObservers observers;
  observers.add(dumper);
  const Tensor t = test::random_tensor({2, 1, 4}, 3, -1.0, 1.0, DType::F32);
  auto forward = [&](int64_t mb, int chunk, const char* owner) {
    ObservationContext c = observation_context();
    c.micro_batch = mb;
    c.model_chunk = chunk;
    ObservationContextScope scope(c);
    observe_activation(owner, "residual_accumulator", SourceKind::ResidualAccumulator, t, ActivationDims::of(false));
  };
  for (int k = 0; k < 2; ++k) {  // two evaluation steps of 2 micro-batches at iteration 7
    RunObservers::Step step(observers, ObservationContext{7, 0, 0, ObservationPhase::Eval});
    forward(0, 0, "decoder.layers.0");
    forward(1, 1, "decoder.layers.2");
  }
  {
    RunObservers::Step step(observers, ObservationContext{7, 0, 0, ObservationPhase::Train});
    forward(1, 1, "decoder.layers.2");
    forward(1, 1, "decoder.layers.12");  // '?' is one character: not dumped
  }
  const formats::SafetensorsContents f = formats::read_safetensors(tensor_dump_path(o.dir, 7, 0));
  std::set<std::string> keys;
  for (const auto& [k, v] : f.tensors) keys.insert(k);
  CHECK(keys == std::set<std::string>{"eval/decoder.layers.0.residual_accumulator/mb0/chunk0",
                                      "eval/decoder.layers.2.residual_accumulator/mb1/chunk1",
                                      "eval/decoder.layers.0.residual_accumulator/mb2/chunk0",
                                      "eval/decoder.layers.2.residual_accumulator/mb3/chunk1",
                                      "decoder.layers.2.residual_accumulator/mb1/chunk1"});
  const nlohmann::json m = nlohmann::json::parse(f.metadata.at("decoder.layers.2.residual_accumulator/mb1/chunk1"));
  CHECK(m.at("model_chunk") == 1);
  CHECK(m.at("micro_batch") == 1);
  CHECK(m.at("tp_shard_dim") == nullptr);
}

}  // namespace
}  // namespace strata
