// The router tracer in real runs (the Trainer adds it when logging.moe_routing_trace_path is set;
// generation takes it through GenerateOptions::observers): per (step, micro-batch, layer) the
// trace's expert counts equal what the routers observed (all pairs, and the kept ones = the trace
// minus `dropped`) and, summed, the MoE accounting's counts of the step; the bf16 sidecars hold
// the observed router inputs and logits rounded to bf16 at the recorded offsets; the dumped router
// state is the weight at the first traced forward; evaluation records are tagged "eval"; a resumed
// run traces (and generating from its checkpoint does not inherit the trace settings); SIGTERM leaves complete lines; generation writes one record per MoE layer per
// forward with no phase; activation recompute does not duplicate records.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <set>
#include <tuple>

#include "core/formats/jsonl.h"
#include "core/formats/safetensors.h"
#include "core/half.h"
#include "formats_test_helpers.h"
#include "models/layers/moe/router.h"
#include "trainer_test_support.h"
#include "training/batch_source.h"
#include "training/inference/generation.h"
#include "training/config/model_factory.h"
#include "training/observability/router_tracer.h"
#include "training/trainer.h"

namespace strata {
namespace {

using Key = std::tuple<std::string, int64_t, int64_t, int64_t>;  // phase, step, micro-batch, layer

int64_t layer_of(std::string_view owner) { return std::stoll(std::string(owner.substr(15))); }  // "decoder.layers."

std::vector<uint16_t> bf16_bits(const std::vector<double>& v) {
  std::vector<uint16_t> b;
  for (double d : v) b.push_back(bfloat16(static_cast<float>(d)).bits);
  return b;
}

// What the routers emitted, per forward: all selected and kept pairs per expert, inputs, logits.
struct Probe : StepObserver {
  int64_t experts = 4;
  std::map<Key, std::vector<int64_t>> all, kept;
  std::map<Key, std::vector<uint16_t>> input, logits;
  std::map<Key, std::vector<double>> indices;
  int64_t signal_iteration = -1;  // raise SIGTERM in this iteration's forward
  SourceKinds kinds_for(const ObservationContext&) override {
    return {SourceKind::RouterInput, SourceKind::RouterLogits, SourceKind::RouterTopIndices, SourceKind::RouterTopKept};
  }
  void on_tensor(const Observation& o) override {
    const ObservationContext& c = observation_context();
    const Key key{observation_phase_name(c.phase), c.iteration, c.micro_batch, layer_of(o.owner)};
    if (o.kind == SourceKind::RouterInput) input[key] = bf16_bits(o.tensor.to_vector());
    if (o.kind == SourceKind::RouterLogits) logits[key] = bf16_bits(o.tensor.to_vector());
    if (o.kind == SourceKind::RouterTopIndices) indices[key] = o.tensor.to_vector();
    if (o.kind == SourceKind::RouterTopKept) {
      const std::vector<double> k = o.tensor.to_vector(), &idx = indices[key];
      std::vector<int64_t>&a = all[key], &kp = kept[key];
      a.assign(experts, 0);
      kp.assign(experts, 0);
      for (size_t i = 0; i < k.size(); ++i) {
        ++a[static_cast<size_t>(idx[i])];
        if (k[i] != 0) ++kp[static_cast<size_t>(idx[i])];
      }
    }
    if (c.phase == ObservationPhase::Train && c.iteration == signal_iteration) std::raise(SIGTERM);
  }
};

std::vector<std::string> moe_options(std::vector<std::string> extra) {
  std::vector<std::string> o = {"model.num_layers=2",          "model.hidden_size=16",
                                "model.num_attention_heads=4", "model.vocab_size=50",
                                "model.make_vocab_size_divisible_by=8", "model.add_bias_linear=false",
                                "model.num_experts=4",         "model.moe_ffn_hidden_size=16",
                                "model.moe_router_topk=2",     "training.micro_batch_size=2",
                                "training.global_batch_size=4", "training.train_iters=3"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

struct Run {
  TrainResult result;
  std::vector<nlohmann::json> records;
  std::map<int64_t, std::vector<double>> first_weights;  // by layer, after initialisation
  std::vector<ExpertLoadStats> last_load;
};

Run train(const ResolvedConfig& cfg, Probe* probe = nullptr) {
  auto model = make_model(cfg, Device::cpu());
  MockBatchSource data(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
  MockBatchSource valid(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 2);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, *model, data, &valid, opt);
  Run r;
  for (const MoeRouterRef& ref : model->moe_routers()) r.first_weights[ref.layer] = ref.router->weight.value.to_vector();
  if (probe) trainer.observers().add(*probe);
  r.result = trainer.train();
  r.last_load = trainer.moe_accounting()->last_stats();
  r.records = formats::read_jsonl(*cfg.logging->moe_routing_trace_path + "/router_trace_rank0.jsonl");
  return r;
}

std::vector<int64_t> counts(const nlohmann::json& rec, int64_t experts, bool minus_dropped) {
  std::vector<int64_t> c(static_cast<size_t>(experts), 0);
  for (const auto& row : rec["top_indices"])
    for (const auto& e : row) ++c[e.get<size_t>()];
  if (minus_dropped && rec.contains("dropped"))
    for (const auto& te : rec["dropped"]) --c[te[1].get<size_t>()];
  return c;
}

Key key_of(const nlohmann::json& r) {
  return {r.value("phase", std::string("generate")), r["step"].get<int64_t>(), r["micro_batch"].get<int64_t>(),
          r["layer"].get<int64_t>()};
}

std::vector<uint16_t> sidecar(const std::string& path, const nlohmann::json& r, const char* prefix) {
  const std::string p(prefix);
  std::ifstream in(path, std::ios::binary);
  in.seekg(r[p + "_offset"].get<int64_t>());
  std::vector<uint16_t> v(r[p + "_bytes"].get<size_t>() / 2);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 2));
  REQUIRE(in.good());
  const auto shape = r[p + "_shape"].get<std::vector<int64_t>>();
  REQUIRE(static_cast<int64_t>(v.size()) == shape[0] * shape[1]);
  return v;
}

TEST_CASE("router tracer: a training run's counts, sidecars, weights and evaluation records", "[router_trace]") {
  test::TempDir dir("router_trace_train");
  const ResolvedConfig cfg = test::tiny_config(moe_options(
      {"model.moe_expert_capacity_factor=0.5", "training.eval_interval=2", "training.eval_iters=1",
       "logging.moe_routing_trace_path=" + dir.path().string(), "logging.moe_routing_trace_capture_logits=true",
       "logging.moe_routing_trace_capture_hidden_states=true", "logging.moe_routing_trace_dump_weights=true"}));
  Probe probe;
  const Run r = train(cfg, &probe);
  // 3 iterations + 1 evaluation pass (after iteration 2), 2 micro-batches, MoE layers 0 and 1.
  REQUIRE(r.records.size() == 16);
  std::map<std::string, int> per_phase;
  bool any_dropped = false;
  std::map<int64_t, std::vector<int64_t>> last_step;  // layer -> kept counts of iteration 2
  for (const nlohmann::json& rec : r.records) {
    const Key key = key_of(rec);
    INFO(rec.dump());
    ++per_phase[std::get<0>(key)];
    CHECK(rec["num_tokens"] == 16);  // s 8 x b 2
    CHECK(counts(rec, 4, false) == probe.all.at(key));
    CHECK(counts(rec, 4, true) == probe.kept.at(key));
    any_dropped |= rec.contains("dropped");
    CHECK(sidecar(dir.file("hidden_states_rank0.bin"), rec, "hs") == probe.input.at(key));
    CHECK(sidecar(dir.file("logits_rank0.bin"), rec, "logit") == probe.logits.at(key));
    CHECK(rec["hs_shape"] == nlohmann::json({16, 16}));
    CHECK(rec["logit_shape"] == nlohmann::json({16, 4}));
    if (std::get<0>(key) == "train" && std::get<1>(key) == 2) {
      auto& c = last_step[std::get<3>(key)];
      c.resize(4);
      const auto k = counts(rec, 4, true);
      for (size_t e = 0; e < 4; ++e) c[e] += k[e];
    }
  }
  CHECK(per_phase == std::map<std::string, int>{{"eval", 4}, {"train", 12}});
  CHECK(any_dropped);  // capacity 0.5 drops pairs; their records stay
  REQUIRE(r.last_load.size() == 2);
  for (const ExpertLoadStats& s : r.last_load) {  // the dispatcher-side counts of the last step
    std::vector<double> want(last_step[s.layer].begin(), last_step[s.layer].end());
    CHECK(s.counts == want);
  }
  const formats::SafetensorsContents st = formats::read_safetensors(dir.file("router_state_rank0.safetensors"));
  for (int64_t l : {0, 1}) {
    const std::string p = "decoder.." + std::to_string(l);
    CHECK(st.tensors.at(p + ".weight").shape() == Shape{4, 16});
    CHECK(st.tensors.at(p + ".weight").to_vector() == r.first_weights.at(l));
    CHECK(st.metadata.at(p + ".score_function") == "softmax");
    CHECK(st.metadata.at(p + ".topk") == "2");
    CHECK(st.metadata.at(p + ".parameter") == "decoder.layers." + std::to_string(l) + ".mlp.router.weight");
    CHECK(st.tensors.count(p + ".expert_bias") == 0);  // no expert bias in this model
  }
}

TEST_CASE("router tracer: a hybrid model's MTP routers (nested stack) are traced and accounted", "[router_trace][mtp]") {
  // Megatron's router_trace.py: mtp.layers.<h>.mtp_model_layer.layers.<j> -> block "mtp", mtp_idx h,
  // layer j. The MoE accounting lists the MTP layers under their global numbers (2 + 2·h + 1).
  test::TempDir dir("router_trace_hybrid_mtp");
  const ResolvedConfig cfg = test::tiny_config(moe_options(
      {"model.hybrid_layer_pattern='*E/*E/*E'", "model.position_embedding_type=rope", "training.train_iters=1",
       "logging.moe_routing_trace_path=" + dir.path().string(), "logging.moe_routing_trace_dump_weights=true"}));
  const Run r = train(cfg);
  std::map<std::string, int> seen;  // "block/mtp_idx/layer" -> records
  for (const nlohmann::json& rec : r.records)
    ++seen[rec["block"].get<std::string>() + "/" + (rec.contains("mtp_idx") ? std::to_string(rec["mtp_idx"].get<int>()) : "-") +
           "/" + std::to_string(rec["layer"].get<int>())];
  CHECK(seen == std::map<std::string, int>{{"decoder/-/1", 2}, {"mtp/0/1", 2}, {"mtp/1/1", 2}});  // 2 micro-batches
  std::vector<int64_t> layers;
  double tokens = 0;
  for (const ExpertLoadStats& s : r.last_load) layers.push_back(s.layer), tokens += s.tokens;
  CHECK(layers == std::vector<int64_t>{1, 3, 5});
  CHECK(tokens == 3 * 2 * 16 * 2);  // 3 routers x 2 micro-batches x 16 tokens x top-2
  // The router state holds the MTP routers too, under Megatron's ("mtp", h, j) keys.
  const formats::SafetensorsContents st = formats::read_safetensors(dir.file("router_state_rank0.safetensors"));
  for (const auto& [prefix, layer, name] : {std::tuple<std::string, int64_t, std::string>{"decoder..1", 1, "decoder.layers.1"},
                                            {"mtp.0.1", 3, "mtp.layers.0.mtp_model_layer.layers.1"},
                                            {"mtp.1.1", 5, "mtp.layers.1.mtp_model_layer.layers.1"}}) {
    INFO(prefix);
    REQUIRE(st.tensors.count(prefix + ".weight") == 1);
    CHECK(st.tensors.at(prefix + ".weight").to_vector() == r.first_weights.at(layer));
    CHECK(st.metadata.at(prefix + ".parameter") == name + ".mlp.router.weight");
  }
}

TEST_CASE("router tracer: a GPT model's MTP router is dumped as (mtp, 0, 0)", "[router_trace][mtp]") {
  test::TempDir dir("router_trace_gpt_mtp");
  const ResolvedConfig cfg = test::tiny_config(moe_options(
      {"model.mtp_num_layers=1", "model.position_embedding_type=rope", "training.train_iters=1",
       "logging.moe_routing_trace_path=" + dir.path().string(), "logging.moe_routing_trace_dump_weights=true"}));
  const Run r = train(cfg);
  const formats::SafetensorsContents st = formats::read_safetensors(dir.file("router_state_rank0.safetensors"));
  CHECK(st.tensors.count("decoder..0.weight") == 1);
  CHECK(st.tensors.count("decoder..1.weight") == 1);
  REQUIRE(st.tensors.count("mtp.0.0.weight") == 1);
  CHECK(st.tensors.at("mtp.0.0.weight").to_vector() == r.first_weights.at(2));  // global layer num_layers + 0
  CHECK(st.metadata.at("mtp.0.0.parameter") == "mtp.layers.0.mtp_model_layer.mlp.router.weight");
}

TEST_CASE("router tracer: under input jitter the logits sidecar is the gating of the hidden-state sidecar",
          "[router_trace]") {
  // Megatron's tracer records the router's pre-jitter input and gates that same input again; the
  // router itself gated a jittered copy (its router_logits observation).
  test::TempDir dir("router_trace_jitter");
  const ResolvedConfig cfg = test::tiny_config(moe_options(
      {"model.moe_input_jitter_eps=0.3", "training.train_iters=1", "logging.moe_routing_trace_path=" + dir.path().string(),
       "logging.moe_routing_trace_capture_logits=true", "logging.moe_routing_trace_capture_hidden_states=true"}));
  Probe probe;
  const Run r = train(cfg, &probe);
  REQUIRE(r.records.size() == 4);  // 2 micro-batches x 2 MoE layers
  auto f32 = [](const std::vector<uint16_t>& bits) {
    std::vector<double> v;
    for (uint16_t b : bits) v.push_back(static_cast<float>(bfloat16::from_bits(b)));
    return v;
  };
  for (const nlohmann::json& rec : r.records) {
    const Key key = key_of(rec);
    const std::vector<double> hs = f32(sidecar(dir.file("hidden_states_rank0.bin"), rec, "hs"));
    const std::vector<double> lg = f32(sidecar(dir.file("logits_rank0.bin"), rec, "logit"));
    const std::vector<double> jittered = f32(probe.logits.at(key));
    CHECK(sidecar(dir.file("hidden_states_rank0.bin"), rec, "hs") == probe.input.at(key));  // pre-jitter
    const std::vector<double>& w = r.first_weights.at(std::get<3>(key));  // [4, 16]
    double scale = 0, err = 0, jitter_err = 0;
    for (int64_t t = 0; t < 16; ++t)
      for (int64_t e = 0; e < 4; ++e) {
        double ref = 0;
        for (int64_t h = 0; h < 16; ++h) ref += hs[static_cast<size_t>(t * 16 + h)] * w[static_cast<size_t>(e * 16 + h)];
        const size_t i = static_cast<size_t>(t * 4 + e);
        scale = std::max(scale, std::abs(ref));
        err = std::max(err, std::abs(lg[i] - ref));
        jitter_err = std::max(jitter_err, std::abs(jittered[i] - ref));
      }
    INFO(rec.dump() << " scale " << scale << " err " << err << " jittered " << jitter_err);
    CHECK(err <= 0.02 * scale);         // bf16 rounding of the input and the logits only
    CHECK(jitter_err > 5 * err + 1e-9);  // the router's own logits saw the jitter
  }
}

TEST_CASE("router tracer: max iterations stop tracing, a resumed run traces", "[router_trace]") {
  test::TempDir dir("router_trace_resume");
  const std::string trace = dir.file("trace"), ckpt = dir.file("ckpt");
  const ResolvedConfig first = test::tiny_config(moe_options(
      {"training.train_iters=3", "checkpoint.save=" + ckpt, "data.tokenizer_type=NullTokenizer",
       "model.moe_router_num_groups=2", "model.moe_router_group_topk=1", "logging.moe_routing_trace_dump_weights=true", "logging.moe_routing_trace_path=" + trace,
       "logging.moe_routing_trace_max_training_iters=2"}));
  const Run a = train(first);
  std::set<int64_t> steps;
  for (const auto& rec : a.records) steps.insert(rec["step"].get<int64_t>());
  CHECK(steps == std::set<int64_t>{0, 1});
  CHECK(a.records.size() == 8);
  const formats::SafetensorsHeader state = formats::read_safetensors_header(trace + "/router_state_rank0.safetensors");
  CHECK(state.metadata.at("decoder..1.num_groups") == "2");  // group-limited routing, for a predictor
  CHECK(state.metadata.at("decoder..1.group_topk") == "1");
  const ResolvedConfig resumed = test::tiny_config(moe_options(
      {"training.train_iters=5", "checkpoint.load=" + ckpt, "checkpoint.override_opt_param_scheduler=true",
       "model.moe_router_num_groups=2",
       "model.moe_router_group_topk=1", "logging.moe_routing_trace_path=" + trace,
       "logging.moe_routing_trace_max_training_iters=1"}));
  const Run b = train(resumed);
  REQUIRE(b.result.start_iteration == 3);
  REQUIRE(b.records.size() == 4);  // the trace starts again (truncated): iteration 3 only
  for (const auto& rec : b.records) CHECK(rec["step"] == 3);

  // Generating from the checkpoint does not take over the training run's trace settings (it would
  // truncate that trace); it traces when the overrides ask.
  const generation::LoadedModel plain = generation::load_for_inference(ckpt);
  CHECK_FALSE(plain.config.logging->moe_routing_trace_path.has_value());
  CHECK_FALSE(plain.config.logging->moe_routing_trace_max_training_iters.has_value());
  const generation::LoadedModel traced =
      generation::load_for_inference(ckpt, {"logging.moe_routing_trace_path=" + dir.file("gen")});
  CHECK(traced.config.logging->moe_routing_trace_path == dir.file("gen"));
  CHECK(formats::read_jsonl(trace + "/router_trace_rank0.jsonl").size() == 4);  // untouched
}

TEST_CASE("router tracer: activation recompute replays the routers without duplicating records", "[router_trace][recompute]") {
  // The replays run inside a SuspendScope (models/blocks/recompute.cpp, TransformerLayer's and
  // MoELayer's selective replays): the trace is the one of a run without recompute.
  auto trace = [](const std::string& name, const std::vector<std::string>& extra) {
    test::TempDir dir(name);
    std::vector<std::string> o = {"training.train_iters=2", "logging.moe_routing_trace_path=" + dir.path().string(),
                                  "logging.moe_routing_trace_capture_hidden_states=true"};
    o.insert(o.end(), extra.begin(), extra.end());
    const Run r = train(test::tiny_config(moe_options(o)));
    return std::make_pair(r.records, test::read_bytes(dir.file("hidden_states_rank0.bin")));
  };
  const auto ref = trace("router_trace_no_recompute", {});
  REQUIRE(ref.first.size() == 8);  // 2 iterations x 2 micro-batches x 2 MoE layers
  const std::vector<std::vector<std::string>> modes = {
      {"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"},
      {"model.recompute_granularity=full", "model.recompute_method=block", "model.recompute_num_layers=2"},
      {"model.recompute_granularity=selective", "model.recompute_modules=[moe]"},
      {"model.moe_layer_recompute=true"}};
  for (size_t i = 0; i < modes.size(); ++i) {
    INFO(modes[i].front() << " (mode " << i << ")");
    const auto got = trace("router_trace_recompute_" + std::to_string(i), modes[i]);
    CHECK(got.first == ref.first);
    CHECK(got.second == ref.second);
  }
}

TEST_CASE("router tracer: SIGTERM stops the run with every record written, whole lines", "[router_trace]") {
  test::TempDir dir("router_trace_signal");
  const ResolvedConfig cfg = test::tiny_config(
      moe_options({"training.train_iters=10", "logging.moe_routing_trace_path=" + dir.path().string()}));
  Probe probe;
  probe.signal_iteration = 1;
  const Run r = train(cfg, &probe);
  CHECK(r.result.stopped_by_signal);
  CHECK(r.result.final_iteration == 2);
  std::ifstream in(dir.file("router_trace_rank0.jsonl"), std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().back() == '\n');  // read_jsonl (in train()) also refused a partial line
  REQUIRE(r.records.size() == 8);    // iterations 0 and 1 (the one the signal arrived in), 2 x 2
  CHECK(r.records.back()["step"] == 1);
}

TEST_CASE("router tracer: generation traces one record per MoE layer per forward", "[router_trace]") {
  test::TempDir dir("router_trace_generate");
  const ResolvedConfig cfg = test::tiny_config(moe_options({"logging.moe_routing_trace_path=" + dir.path().string(),
                                                            "logging.moe_routing_trace_max_inference_steps=2"}));
  auto model = make_model(cfg, Device::cpu());
  model->init_parameters(3);
  RunObservers observers;
  observers.add(make_router_tracer(cfg, {model.get()}, 0));
  generation::GenerateOptions go;
  go.max_new_tokens = 4;  // forwards: the prompt, then 3 decode steps; traced: the first 2
  go.sampling.temperature = 0;
  go.observers = &observers;
  CHECK(generation::generate(*model, {1, 2, 3, 4}, go).size() == 4);
  observers.finish();
  const auto recs = formats::read_jsonl(dir.file("router_trace_rank0.jsonl"));
  REQUIRE(recs.size() == 4);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> want = {{0, 0, 4}, {0, 1, 4}, {1, 0, 1}, {1, 1, 1}};
  for (size_t i = 0; i < recs.size(); ++i) {
    CHECK(std::make_tuple(recs[i]["step"].get<int64_t>(), recs[i]["layer"].get<int64_t>(),
                          recs[i]["num_tokens"].get<int64_t>()) == want[i]);
    CHECK_FALSE(recs[i].contains("phase"));
    CHECK(recs[i]["top_indices"].size() == recs[i]["num_tokens"].get<size_t>());
  }
}

}  // namespace
}  // namespace strata
