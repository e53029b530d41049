// The router tracer (training/observability/router_tracer.h) fed directly through its observation sites: the
// exact JSONL text of Megatron's schema (key order, json.dumps formatting, Strata's micro_batch /
// phase / dropped after Megatron's keys, no phase in generation), the bf16 sidecar bytes at the
// recorded offsets, the captured-steps limits (then kinds_for selects nothing), evaluation not
// counted; the config's rules (errors name the field) and the Megatron flags by name.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/config_table.h"
#include "core/half.h"
#include "formats_test_helpers.h"
#include "trainer_test_support.h"
#include "training/observability/router_tracer.h"

namespace strata {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* const kOwner = "decoder.layers.7.mlp.router";

// One router forward's sites as the router emits them: input [2, 1, 3], logits [2, 1, 4],
// top indices [2, 2], kept mask [2, 2].
void router_forward(const std::vector<double>& x, const std::vector<double>& logits, const std::vector<double>& idx,
                    const std::vector<double>& kept) {
  observe(kOwner, "router_input", SourceKind::RouterInput, Tensor::from_vector(x, {2, 1, 3}, DType::F32));
  observe(kOwner, "router_logits", SourceKind::RouterLogits, Tensor::from_vector(logits, {2, 1, 4}, DType::F32));
  observe(kOwner, "router_top_indices", SourceKind::RouterTopIndices, Tensor::from_vector(idx, {2, 2}, DType::I64));
  observe(kOwner, "router_top_kept", SourceKind::RouterTopKept, Tensor::from_vector(kept, {2, 2}, DType::U8));
}

void forward_in(RunObservers& runs, ObservationContext c, int64_t mb, const std::vector<double>& x,
                const std::vector<double>& kept) {
  RunObservers::Step step(runs, c);
  ObservationContext f = c;
  f.micro_batch = mb;
  ObservationContextScope scope(f);
  router_forward(x, {0.5, -1, 2, 0.25, 1, 1.5, -2, 0}, {3, 1, 0, 2}, kept);
}

std::vector<uint16_t> bf16_bits(const std::vector<double>& v) {
  std::vector<uint16_t> b;
  for (double d : v) b.push_back(bfloat16(static_cast<float>(d)).bits);
  return b;
}

TEST_CASE("router tracer: Megatron's schema text, Strata's extras and the bf16 sidecars", "[router_trace]") {
  test::TempDir dir("router_trace_schema");
  RouterTracerOptions o;
  o.dir = dir.path().string();
  o.rank = 3;
  o.max_training_iters = 10;
  o.capture_logits = o.capture_hidden_states = true;
  RouterTracer tracer(o, {});
  RunObservers runs;
  runs.add(tracer);
  const std::vector<double> x1 = {1.0, -2.5, 0.5, 3.0, 0.1, -0.3}, x2 = {2, 4, 8, 16, 32, 64};
  forward_in(runs, {5, 0, 0, ObservationPhase::Train}, 1, x1, {1, 1, 1, 0});  // (token 1, expert 2) dropped
  forward_in(runs, {5, 0, 0, ObservationPhase::Eval}, 0, x2, {1, 1, 1, 1});
  forward_in(runs, {0, 0, 0, ObservationPhase::Generate}, 0, x2, {1, 1, 1, 1});
  tracer.finish();
  const std::string head = R"({"step": 5, "stage": "pre_dispatch", "block": "decoder", "layer": 7, "rank": 3, )"
                           R"("num_tokens": 2, "topk": 2, )";
  const std::string idx = R"("top_indices": [[3, 1], [0, 2]], )";
  const std::string want =
      head + R"("hs_offset": 0, "hs_bytes": 12, "hs_shape": [2, 3], "logit_offset": 0, "logit_bytes": 16, )"
             R"("logit_shape": [2, 4], )" + idx + R"("micro_batch": 1, "phase": "train", "dropped": [[1, 2]]})" "\n" +
      head + R"("hs_offset": 12, "hs_bytes": 12, "hs_shape": [2, 3], "logit_offset": 16, "logit_bytes": 16, )"
             R"("logit_shape": [2, 4], )" + idx + R"("micro_batch": 0, "phase": "eval"})" "\n" +
      R"({"step": 0, "stage": "pre_dispatch", "block": "decoder", "layer": 7, "rank": 3, "num_tokens": 2, )"
      R"("topk": 2, "hs_offset": 24, "hs_bytes": 12, "hs_shape": [2, 3], "logit_offset": 32, "logit_bytes": 16, )"
      R"("logit_shape": [2, 4], )" + idx + R"("micro_batch": 0})" "\n";
  CHECK(read_text(dir.file("router_trace_rank3.jsonl")) == want);
  // The sidecars: each forward's bf16 bits, little-endian, back to back.
  std::vector<double> all_x = x1;
  all_x.insert(all_x.end(), x2.begin(), x2.end());
  all_x.insert(all_x.end(), x2.begin(), x2.end());
  const std::string hs = read_text(dir.file("hidden_states_rank3.bin"));
  REQUIRE(hs.size() == 36);
  std::vector<uint16_t> got(18);
  std::memcpy(got.data(), hs.data(), hs.size());
  CHECK(got == bf16_bits(all_x));
  const std::string lg = read_text(dir.file("logits_rank3.bin"));
  REQUIRE(lg.size() == 48);
  std::memcpy(got.data(), lg.data() + 32, 16);
  got.resize(8);
  CHECK(got == bf16_bits({0.5, -1, 2, 0.25, 1, 1.5, -2, 0}));
  CHECK(tracer.traced_training_iters() == 1);  // evaluation does not count
  CHECK(tracer.traced_inference_steps() == 1);

  // Logits alone (no router_input site observed): the logits still reach their record.
  test::TempDir only("router_trace_logits_only");
  o.dir = only.path().string();
  o.capture_hidden_states = false;
  RouterTracer logits_only(o, {});
  RunObservers runs2;
  runs2.add(logits_only);
  forward_in(runs2, {1, 0, 0, ObservationPhase::Train}, 0, x1, {1, 1, 1, 1});
  forward_in(runs2, {2, 0, 0, ObservationPhase::Train}, 0, x1, {1, 1, 1, 1});  // the same router again
  logits_only.finish();
  const std::string tail = R"("logit_offset": 16, "logit_bytes": 16, "logit_shape": [2, 4], )" + idx +
                           R"("micro_batch": 0, "phase": "train"})" "\n";
  const std::string text = read_text(only.file("router_trace_rank3.jsonl"));
  CHECK(text.find("hs_") == std::string::npos);
  CHECK(text.size() > tail.size());
  CHECK(text.substr(text.size() - tail.size()) == tail);
  CHECK(std::filesystem::file_size(only.file("logits_rank3.bin")) == 32);
}

TEST_CASE("router tracer: the captured-steps limits detach the tracer, off writes nothing", "[router_trace]") {
  test::TempDir dir("router_trace_limits");
  RouterTracerOptions o;
  o.dir = dir.path().string();
  o.max_training_iters = 2;
  o.max_inference_steps = 1;
  RouterTracer tracer(o, {});
  RunObservers runs;
  runs.add(tracer);
  for (int64_t it = 40; it < 44; ++it) {  // a resumed run: iterations 40.. are traced
    const ObservationContext c{it, 0, 0, ObservationPhase::Train};
    CHECK(tracer.kinds_for(c).empty() == (it >= 42));
    forward_in(runs, c, 0, {1, 2, 3, 4, 5, 6}, {1, 1, 1, 1});
  }
  CHECK(tracer.detached());
  CHECK(tracer.kinds_for({50, 0, 0, ObservationPhase::Eval}).empty());
  tracer.finish();
  const std::string text = read_text(dir.file("router_trace_rank0.jsonl"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);
  CHECK(text.find("\"step\": 40,") != std::string::npos);
  CHECK(text.find("\"step\": 41,") != std::string::npos);
  CHECK(text.find("\"step\": 42,") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("hidden_states_rank0.bin")));  // not asked for
  CHECK(text.find("hs_offset") == std::string::npos);

  RouterTracer gen(o, {});
  CHECK_FALSE(gen.kinds_for({0, 0, 0, ObservationPhase::Generate}).empty());
  gen.end_step({0, 0, 0, ObservationPhase::Generate});
  CHECK(gen.kinds_for({1, 0, 0, ObservationPhase::Generate}).empty());
}

std::string config_error(const std::vector<std::string>& extra) {
  try {
    test::tiny_config(extra);
  } catch (const config::ConfigError& e) {
    return e.field() + ": " + e.what();
  }
  return "(no ConfigError)";
}

TEST_CASE("router tracer: config rules name the field, Megatron's flags map by name", "[router_trace]") {
  CHECK_THAT(config_error({"logging.moe_routing_trace_path=/tmp/x"}),
             Catch::StartsWith("logging.moe_routing_trace_path:") && Catch::Contains("num_experts"));
  const std::vector<std::string> moe = {"model.num_experts=4", "model.moe_router_topk=2", "model.add_bias_linear=false",
                                        "model.moe_ffn_hidden_size=16"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), moe.begin(), moe.end());
    return config_error(extra);
  };
  CHECK(with({"logging.moe_routing_trace_path=/tmp/x"}) == "(no ConfigError)");
  CHECK_THAT(with({"logging.moe_routing_trace_path=/tmp/x", "logging.moe_routing_trace_max_training_iters=0"}),
             Catch::StartsWith("logging.moe_routing_trace_max_training_iters:"));
  CHECK_THAT(with({"logging.moe_routing_trace_path=/tmp/x", "logging.moe_routing_trace_max_inference_steps=-1"}),
             Catch::StartsWith("logging.moe_routing_trace_max_inference_steps:"));
  CHECK_THAT(with({"logging.moe_routing_trace_capture_logits=true"}),
             Catch::StartsWith("logging.moe_routing_trace_capture_logits:") &&
                 Catch::Contains("needs logging.moe_routing_trace_path"));
  StrataConfig c = StrataConfig::load("", {"--moe-routing-trace-path", "/tmp/t", "--moe-routing-trace-max-training-iters",
                                           "3", "--moe-routing-trace-capture-hidden-states",
                                           "--moe-routing-trace-dump-weights"});
  CHECK(c.logging.moe_routing_trace_path == "/tmp/t");
  CHECK(c.logging.moe_routing_trace_max_training_iters == 3);
  CHECK(c.logging.moe_routing_trace_capture_hidden_states);
  CHECK(c.logging.moe_routing_trace_dump_weights);
  CHECK_FALSE(c.logging.moe_routing_trace_capture_logits);
  // The options are read from the resolved config: a valid run (the trace needs experts).
  for (const std::string& o : moe) c.apply_override(o);
  c.apply_override("optimizer.lr=1.0e-3");
  c.apply_override("data.mock_data=true");
  c.training.train_iters = 9;
  const RouterTracerOptions o = RouterTracerOptions::from_config(c.validate(1), 2);
  CHECK(o.max_training_iters == 3);
  CHECK(o.max_inference_steps == 1000000000);
  c.logging.moe_routing_trace_max_training_iters.reset();
  CHECK(RouterTracerOptions::from_config(c.validate(1), 2).max_training_iters == 9);  // null: train_iters
}

}  // namespace
}  // namespace strata
