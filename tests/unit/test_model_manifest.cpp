// The model manifest (models/model_manifest.h) against real models: for every model family (GPT,
// GPT+MoE, hybrid, +MTP, repeated MTP, +mHC) a training forward and backward under an observer of
// every source kind emits exactly the manifest's sites, each once, with the manifest's kind; the
// tensor dumper accepts every site (the mHC ones included). And an mHC layer checked from outside
// (in f64, within f32 rounding) from its dumped tensors alone: the aggregated input of each site is Σ_i h_pre[i]·x_i and
// the merge Σ_i H_res[i,j]·x_i + h_post[j]·(y + bias) gives the next site's input and the next
// layer's residual stream (Megatron dev's HyperConnectionModule semantics, docs/mhc.md). The
// parameters the manifest reads from its meta build are the ones a real model builds, and a
// DeepSeek-sized manifest allocates nothing and takes well under a second.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/observe.h"
#include "manifest_check.h"
#include "models/model_manifest.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/config/model_factory.h"
#include "training/observability/tensor_dump_sites.h"

namespace strata {
namespace {

struct Recorder : Observer {
  std::map<std::string, std::vector<SourceKind>> seen;  // site path -> kinds seen (one per emission)
  std::map<std::string, Tensor> last;                   // site path -> f64 copy of the last tensor
  void on_tensor(const Observation& o) override {
    const std::string path = std::string(o.owner) + "." + std::string(o.name);
    seen[path].push_back(o.kind);
    last[path] = o.tensor.contiguous().to(DType::F64).clone();
  }
};

const std::vector<std::string> kCommon = {
    "model.hidden_size=16",         "model.num_attention_heads=4", "model.vocab_size=50",
    "model.make_vocab_size_divisible_by=8", "model.position_embedding_type=rope", "model.add_bias_linear=false",
    "model.hidden_dropout=0",       "model.attention_dropout=0",   "model.mamba_head_dim=8",
    "model.mamba_num_groups=2",     "model.mamba_state_dim=4",     "model.mamba_chunk_size=4"};

// Runs one training forward and backward of the model of `cfg` with every kind observed.
Recorder run_observed(const ResolvedConfig& cfg, uint64_t seed = 3, bool random_biases = false) {
  std::unique_ptr<LanguageModel> model = make_model(cfg, Device::cpu());
  model->init_parameters(seed);
  if (random_biases)  // Megatron initialises biases to 0; the check below needs them to matter
    for (Parameter* p : model->parameters())
      if (p->name.size() > 5 && p->name.compare(p->name.size() - 5, 5, ".bias") == 0)
        p->value.copy_(test::random_tensor(p->value.shape(), seed + p->value.numel(), -0.5, 0.5, p->value.dtype()));
  Recorder rec;
  CaptureScope scope(rec, SourceKinds::all());
  auto ctx = model->make_context(1, 0, true);
  const ForwardOutput out = model->forward_pass(*ctx, test::fixed_batch(2, 8, 50));
  BackwardInput in;
  for (const NamedLoss& l : out.losses)
    in.loss_grads.push_back(Tensor::full(l.value.shape(), 1.0, l.value.dtype(), l.value.device()));
  model->backward_pass(*ctx, in);
  return rec;
}

ResolvedConfig config_of(const std::vector<std::string>& variant) {
  std::vector<std::string> o = kCommon;
  o.insert(o.end(), variant.begin(), variant.end());
  for (const std::string& v : variant)  // MoE fields only with experts
    if (v.rfind("model.num_experts=", 0) == 0) o.insert(o.end(), {"model.moe_ffn_hidden_size=8", "model.moe_router_topk=2"});
  return test::tiny_config(o);
}

// Every model family: GPT, GPT+MoE, hybrid, GPT/hybrid MTP, repeated MTP, GPT/hybrid mHC.
const std::vector<std::vector<std::string>> kFamilies = {
    {"model.num_layers=2"},
    {"model.num_layers=3", "model.num_experts=4", "model.moe_layer_freq=[0, 1, 1]"},
    {"model.hybrid_layer_pattern='M*-E'", "model.num_experts=4"},
    {"model.num_layers=2", "model.mtp_num_layers=2", "model.num_experts=4", "model.moe_layer_freq=[0, 1]"},
    {"model.num_layers=2", "model.mtp_num_layers=2", "model.mtp_use_repeated_layer=true"},
    {"model.hybrid_layer_pattern='M*E/*E/*E'", "model.num_experts=4"},
    {"model.num_layers=2", "model.enable_hyper_connections=true", "model.num_residual_streams=3",
     "model.num_experts=4", "model.moe_layer_freq=[0, 1]"},
    {"model.num_layers=2", "model.enable_hyper_connections=true", "model.num_residual_streams=2",
     "model.mtp_num_layers=1"},
    {"model.hybrid_layer_pattern='M*-E/*E'", "model.enable_hyper_connections=true", "model.num_residual_streams=2",
     "model.num_experts=4"},
};

}  // namespace

TEST_CASE("model manifest: the sites a real forward and backward emit are the manifest's", "[manifest][observe]") {
  const std::vector<std::vector<std::string>>& variants = kFamilies;
  for (const auto& v : variants) {
    const ResolvedConfig cfg = config_of(v);
    INFO(v.front() << (v.size() > 1 ? " " + v[1] : std::string()) << (v.size() > 2 ? " " + v[2] : std::string()));
    const ModelManifest manifest = build_model_manifest(cfg.model);
    std::map<std::string, const ObservationSite*> want;
    for (const ObservationSite& s : manifest.sites) {
      CHECK(want.count(s.path()) == 0);  // each site listed once
      want[s.path()] = &s;
    }
    const Recorder rec = run_observed(cfg);
    for (const auto& [path, kinds] : rec.seen) {
      INFO(path);
      REQUIRE(want.count(path) == 1);  // emitted ⊆ manifest
      CHECK(static_cast<int64_t>(kinds.size()) == want.at(path)->per_forward);  // one training forward
      for (SourceKind k : kinds) CHECK(k == want.at(path)->kind);
    }
    for (const auto& [path, kind] : want) {
      INFO(path);
      CHECK(rec.seen.count(path) == 1);  // manifest ⊆ emitted
    }
    // The named losses are the model's.
    CHECK(manifest.losses == make_model(cfg, Device::cpu())->loss_names());
    // The manifest's layers: decoder layers in order, then the MTP inner layers.
    const int64_t decoder = cfg.model->num_layers;
    REQUIRE(static_cast<int64_t>(manifest.layers.size()) >= decoder);
    for (int64_t l = 0; l < decoder; ++l) {
      CHECK(manifest.layers[static_cast<size_t>(l)].name == "decoder.layers." + std::to_string(l));
      CHECK(manifest.layers[static_cast<size_t>(l)].number == l);
      CHECK_FALSE(manifest.layers[static_cast<size_t>(l)].mtp);
    }
    for (size_t i = static_cast<size_t>(decoder); i < manifest.layers.size(); ++i) {
      CHECK(manifest.layers[i].mtp);
      CHECK(manifest.layers[i].name.rfind("mtp.layers.", 0) == 0);
    }
  }
}

TEST_CASE("model manifest: every mHC site can be dumped", "[manifest][tensor_dump][mhc]") {
  for (const char* pattern : {"model.num_layers=2", "model.hybrid_layer_pattern='M*'"}) {
    const ResolvedConfig cfg =
        config_of({pattern, "model.enable_hyper_connections=true", "model.num_residual_streams=2",
                   "logging.tensor_dump_sites=['*mhc*']", "logging.tensor_dump_iters=[0]"});
    INFO(pattern);
    CHECK_NOTHROW(validate_tensor_dump(cfg));
    CHECK(site_kinds({"*mhc*"}, cfg.model) ==
          SourceKinds{SourceKind::MhcHPre, SourceKind::MhcHPost, SourceKind::MhcHRes, SourceKind::MhcSinkhornResidual,
                      SourceKind::MhcLayerInput, SourceKind::MhcLayerOutput});
    CHECK(site_kinds({"*.mhc_layer_output"}, cfg.model) == SourceKinds{SourceKind::MhcLayerOutput});
  }
}

namespace {

// agg[t, c] = Σ_i h_pre[t, i]·x[t, i, c]; x [s, b, n, C] (as the residual sites observe it), h_pre
// [s, b, n] → [s, b, C].
std::vector<double> aggregate(const Tensor& x, const Tensor& h_pre) {
  const int64_t T = x.size(0) * x.size(1), n = x.size(2), C = x.size(3);
  const std::vector<double> xv = x.to_vector(), hv = h_pre.to_vector();
  std::vector<double> out(static_cast<size_t>(T * C), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < C; ++c) out[t * C + c] += hv[t * n + i] * xv[(t * n + i) * C + c];
  return out;
}

// x_next[t, j, c] = Σ_i H_res[t, i, j]·x[t, i, c] + h_post[t, j]·y[t, c]  → [s·b·n·C]
std::vector<double> merge(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y) {
  const int64_t T = x.size(0) * x.size(1), n = x.size(2), C = x.size(3);
  const std::vector<double> xv = x.to_vector(), rv = h_res.to_vector(), pv = h_post.to_vector(), yv = y.to_vector();
  std::vector<double> out(static_cast<size_t>(T * n * C), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < C; ++c) {
        double v = pv[t * n + j] * yv[t * C + c];
        for (int64_t i = 0; i < n; ++i) v += rv[(t * n + i) * n + j] * xv[(t * n + i) * C + c];
        out[(t * n + j) * C + c] = v;
      }
  return out;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST_CASE("model manifest: an mHC layer verified from its dumped inputs and outputs alone", "[manifest][mhc]") {
  // With biases, so that mhc_layer_output must carry y + bias. The model runs in f32; the check
  // recomputes in f64 from the observed tensors.
  const ResolvedConfig cfg = config_of({"model.num_layers=2", "model.enable_hyper_connections=true",
                                        "model.num_residual_streams=3", "model.add_bias_linear=true"});
  Recorder rec = run_observed(cfg, 11, /*random_biases=*/true);
  const std::string l0 = "decoder.layers.0", att = l0 + ".self_attention_hyper_connection.",
                    mlp = l0 + ".mlp_hyper_connection.";
  const Tensor& x = rec.last.at(l0 + ".residual_accumulator");  // [s, b, n, C]
  REQUIRE(x.dim() == 4);
  REQUIRE(x.size(2) == 3);
  // The attention site: its aggregated input, then its merge = the MLP site's input streams.
  CHECK(max_diff(aggregate(x, rec.last.at(att + "mhc_h_pre")), rec.last.at(att + "mhc_layer_input").to_vector()) < 1e-5);
  const std::vector<double> x1 = merge(x, rec.last.at(att + "mhc_h_res"), rec.last.at(att + "mhc_h_post"),
                                       rec.last.at(att + "mhc_layer_output"));
  const Tensor x1t = Tensor::from_vector(x1, x.shape(), DType::F64);
  CHECK(max_diff(aggregate(x1t, rec.last.at(mlp + "mhc_h_pre")), rec.last.at(mlp + "mhc_layer_input").to_vector()) < 1e-5);
  // The MLP site's merge = the next layer's residual stream.
  const std::vector<double> x2 = merge(x1t, rec.last.at(mlp + "mhc_h_res"), rec.last.at(mlp + "mhc_h_post"),
                                       rec.last.at(mlp + "mhc_layer_output"));
  CHECK(max_diff(x2, rec.last.at("decoder.layers.1.residual_accumulator").to_vector()) < 1e-5);
  // (The biases are random, so the checks above hold only if mhc_layer_output is y + bias.) The
  // sub-layer output matters: zeroed, the merge misses the next stream by far.
  const std::vector<double> y = rec.last.at(mlp + "mhc_layer_output").to_vector();
  const Tensor bias = Tensor::from_vector(std::vector<double>(y.size(), 0.0), rec.last.at(mlp + "mhc_layer_output").shape(),
                                          DType::F64);
  const std::vector<double> without = merge(x1t, rec.last.at(mlp + "mhc_h_res"), rec.last.at(mlp + "mhc_h_post"), bias);
  CHECK(max_diff(without, x2) > 1e-2);
}

TEST_CASE("model manifest: stages and chunks of a hybrid pattern's segments (hand-computed)", "[manifest]") {
  // Megatron's select_pipeline_segment: segment index = chunk · pp + stage; four segments on two
  // stages make two virtual chunks; the MTP depth sits with the output layer.
  std::vector<std::string> o = kCommon;
  o.insert(o.end(), {"model.hybrid_layer_pattern='M*|-E|M*|-E/*-'", "model.num_experts=4", "model.moe_ffn_hidden_size=8",
                     "model.moe_router_topk=2", "model.seq_length=8", "model.max_position_embeddings=8",
                     "parallel.pipeline_model_parallel_size=2", "training.micro_batch_size=1",
                     "training.global_batch_size=4"});
  const ResolvedConfig cfg =
      StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n", o, "m.yaml").validate(2);
  const ModelManifest m = build_model_manifest(cfg.model, *cfg.parallel);
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 0}, {0, 0}, {1, 0}, {1, 0}, {0, 1}, {0, 1},
                                                         {1, 1}, {1, 1}, {1, 1}, {1, 1}};
  REQUIRE(m.layers.size() == want.size());  // 8 decoder layers, then the MTP depth's two
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(m.layers[i].name);
    CHECK(std::make_pair(m.layers[i].stage, m.layers[i].chunk) == want[i]);
  }
  CHECK(m.layers[8].name == "mtp.layers.0.mtp_model_layer.layers.0");
}


TEST_CASE("model manifest: the parameters a model builds are the manifest's", "[manifest]") {
  // Every family, and the options that add or reshape parameters: LayerNorm biases, qk norms,
  // learned positions, untied output, shared experts with their gate, the router's expert bias.
  std::vector<std::vector<std::string>> variants = kFamilies;
  variants.push_back({"model.num_layers=2", "model.normalization=LayerNorm", "model.qk_layernorm=true",
                      "model.add_bias_linear=true", "model.position_embedding_type=learned_absolute",
                      "model.untie_embeddings_and_output_weights=true", "model.swiglu=true",
                      "model.ffn_hidden_size=32"});
  variants.push_back({"model.num_layers=2", "model.num_experts=4", "model.moe_shared_expert_intermediate_size=8",
                      "model.moe_shared_expert_gate=true", "model.moe_router_enable_expert_bias=true",
                      "model.moe_router_score_function=sigmoid", "model.mtp_num_layers=1"});
  variants.push_back({"model.hybrid_layer_pattern='M*-/M*'", "model.add_bias_linear=true",
                      "model.enable_hyper_connections=true", "model.mhc_learned_output_contract=false"});
  for (std::vector<std::string> v : variants) {
    v.push_back("training.precision=bf16");
    const ResolvedConfig cfg = config_of(v);
    INFO(v.front() << (v.size() > 1 ? " " + v[1] : std::string()) << (v.size() > 2 ? " " + v[2] : std::string()));
    const ModelManifest manifest = build_model_manifest(cfg.model);
    test::RankPosition r;
    r.bf16 = true;
    r.num_experts = cfg.model->num_experts.value_or(0);
    const std::vector<std::string> want = test::manifest_parameter_lines(manifest, r);
    const std::vector<std::string> got = test::built_parameter_lines(make_model(cfg, Device::cpu())->parameters(), true);
    CHECK(got == want);
  }
  // Without a vocabulary the parameters are not listed yet.
  ModelConfig raw = *config_of({"model.num_layers=2"}).model;
  raw.vocab_size.reset();
  CHECK(build_model_manifest(ResolvedModelConfig(raw)).parameters.empty());
}

TEST_CASE("model manifest: a DeepSeek-sized manifest allocates nothing and takes well under a second", "[manifest]") {
  // DeepSeek-V3's sizes (attention as GQA): 61 layers, the first 3 dense, 256 experts of 2048, a
  // shared expert, one MTP depth; the planner builds this manifest for every layout it plans.
  ModelConfig c;
  c.num_layers = 61;
  c.hidden_size = 7168;
  c.num_attention_heads = 128;
  c.ffn_hidden_size = 18432;
  c.swiglu = true;
  c.normalization = Normalization::RMSNorm;
  c.position_embedding_type = PositionEmbeddingType::Rope;
  c.seq_length = 4096;
  c.vocab_size = 129280;
  c.untie_embeddings_and_output_weights = true;
  c.add_bias_linear = false;
  c.num_experts = 256;
  c.moe_ffn_hidden_size = 2048;
  c.moe_shared_expert_intermediate_size = 2048;
  c.moe_router_topk = 8;
  c.moe_layer_freq = {"([0]*3+[1]*58)"};
  c.mtp_num_layers = 1;
  const ResolvedModelConfig m(c);
  const MemoryStats before = memory_stats(Device::cpu());
  const auto start = std::chrono::steady_clock::now();
  const ModelManifest manifest = build_model_manifest(m);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const MemoryStats after = memory_stats(Device::cpu());
  CHECK(after.num_allocs == before.num_allocs);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  INFO("built in " << seconds << " s");
  CHECK(seconds < 0.5);
  int64_t experts = 0, total = 0;
  for (const ManifestParameter& p : manifest.parameters) {
    experts += p.expert >= 0 ? 1 : 0;
    total += p.shape.numel();
  }
  CHECK(experts == (58 + 1) * 256 * 2);  // fc1 and fc2 of every expert, the MTP layer's too
  CHECK(total > 600'000'000'000);
}

}  // namespace strata
