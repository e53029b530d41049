// Layout planning (training/planning/memory_plan.h): parameter counts against the real GPTModel, tp
// sharding sums, the 12h² + 13h layer count, pipeline layer ranges (Megatron's interleaving
// docstring, uneven stages), Korthikanti et al.'s activation formula on hand-computed numbers,
// in-flight micro-batches, bubble fraction and the per-rank memory arithmetic; MoE layers (expert
// parameters per EP/ETP rank, optimizer sharding over dp·cp and expert dp, all-to-all bytes).
// Reference: Korthikanti et al. 2022 (eq. 1–4), megatron/core/parallel_state.py
// (initialize_model_parallel docstring: virtual pipeline layer assignment).
#include "manifest_check.h"
#include "models/model_manifest.h"
#include "models/gpt/gpt_model.h"
#include "training/planning/memory_plan.h"
#include "training/planning/moe_plan.h"
#include "test_helpers.h"

namespace strata {
namespace {

int64_t model_parameter_count(const ResolvedModelConfig& m) {
  GPTModelOptions o;
  o.dtype = DType::F32;
  GPTModel model(m, o);
  int64_t n = 0;
  for (Parameter* p : model.parameters()) n += p->value.numel();
  return n;
}

ResolvedModelConfig small(std::function<void(ModelConfig&)> edit) {
  ModelConfig m;
  m.num_layers = 3;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.vocab_size = 100;
  m.make_vocab_size_divisible_by = 16;
  m.seq_length = 16;
  edit(m);
  return ResolvedModelConfig(m);
}

std::vector<ResolvedModelConfig> model_variants() {
  return {
      small([](ModelConfig&) {}),  // LayerNorm, GeLU, learned positions, tied, biases
      small([](ModelConfig& m) {   // RMSNorm, SwiGLU, RoPE, GQA, qk-layernorm, untied, no biases
        m.normalization = Normalization::RMSNorm;
        m.swiglu = true;
        m.position_embedding_type = PositionEmbeddingType::Rope;
        m.group_query_attention = true;
        m.num_query_groups = 2;
        m.qk_layernorm = true;
        m.untie_embeddings_and_output_weights = true;
        m.add_bias_linear = false;
      }),
      small([](ModelConfig& m) {  // qkv bias only, LayerNorm qk-norm, kv_channels ≠ h/a, no positions
        m.add_bias_linear = false;
        m.add_qkv_bias = true;
        m.qk_layernorm = true;
        m.kv_channels = 16;
        m.position_embedding_type = PositionEmbeddingType::None;
        m.ffn_hidden_size = 48;
        m.max_position_embeddings = 32;
      }),
      small([](ModelConfig& m) {  // MTP heads (docs/mtp.md), untied
        m.position_embedding_type = PositionEmbeddingType::Rope;
        m.mtp_num_layers = 2;
        m.untie_embeddings_and_output_weights = true;
      }),
      small([](ModelConfig& m) {  // one repeated MTP module
        m.position_embedding_type = PositionEmbeddingType::Rope;
        m.mtp_num_layers = 3;
        m.mtp_use_repeated_layer = true;
      }),
      small([](ModelConfig& m) {  // learned positions longer than the sequence, untied, 1p norms
        m.max_position_embeddings = 64;
        m.untie_embeddings_and_output_weights = true;
        m.apply_layernorm_1p = true;
        m.vocab_size = 257;
      }),
  };
}

ResolvedConfig run_config(const std::vector<std::string>& overrides) {
  const StrataConfig cfg = StrataConfig::from_yaml_text(
      "model: {num_layers: 8, hidden_size: 64, num_attention_heads: 8, seq_length: 64, vocab_size: 1000}\n"
      "training: {micro_batch_size: 2, global_batch_size: 32}\n"
      "optimizer: {lr: 1.0e-3}\n"
      "data: {mock_data: true}\n",
      overrides);
  return cfg.validate(std::nullopt);
}

}  // namespace

TEST_CASE("memory plan: tp=1 parameter count equals the real GPTModel's", "[memory_plan]") {
  for (const ResolvedModelConfig& m : model_variants()) CHECK(model_parameter_total(m) == model_parameter_count(m));
}

using test::manifest_at_tp;

TEST_CASE("memory plan: a layer has 12h^2 + 13h parameters (GPT, 4h MLP, biases, LayerNorm)", "[memory_plan]") {
  ResolvedModelConfig m = small([](ModelConfig& c) {
    c.hidden_size = 64;
    c.vocab_size = 1100;
    c.make_vocab_size_divisible_by = 128;
  });
  int64_t layer = 0, replicated = 0;
  for (const ManifestParameter& p : build_model_manifest(m).parameters)
    if (p.layer == 0) {
      layer += p.shape.numel();
      if (!p.tensor_parallel) replicated += p.shape.numel();
    }
  CHECK(layer == 12 * 64 * 64 + 13 * 64);
  // Replicated: two LayerNorms (2·2h) and the two row-parallel biases (2h).
  CHECK(replicated == 6 * 64);
  CHECK(padded_vocab_size(1100, 128, 1) == 1152);
  CHECK(padded_vocab_size(1100, 128, 2) == 1280);  // multiple of 128·2
  CHECK(padded_vocab_size(1100, 128, 4) == 1536);  // multiple of 512
  CHECK(padded_vocab_size(1100, 128, 8) == 2048);  // multiple of 1024
  CHECK(stage_parameter_count(manifest_at_tp(m, 1), 0, 1, 1, 1).total() == model_parameter_count(m));
}

TEST_CASE("memory plan: the tp shards sum to the unsharded count plus vocab padding", "[memory_plan]") {
  for (const ResolvedModelConfig& m : model_variants()) {
    const ParameterCount one = stage_parameter_count(manifest_at_tp(m, 1), 0, 1, 1, 1);
    const int64_t vocab1 = padded_vocab_size(*m->vocab_size, m->make_vocab_size_divisible_by, 1);
    for (int64_t tp : {2, 4}) {
      if (m->num_attention_heads % tp || m.query_groups() % tp || m.ffn() % tp) continue;
      const ParameterCount c = stage_parameter_count(manifest_at_tp(m, tp), 0, tp, tp, 1);
      const int64_t tables = m->untie_embeddings_and_output_weights ? 2 : 1;
      const int64_t extra_vocab =
          tables * (padded_vocab_size(*m->vocab_size, m->make_vocab_size_divisible_by, tp) - vocab1) * m->hidden_size;
      CHECK(tp * c.sharded == one.sharded + extra_vocab);
      CHECK(c.replicated == one.replicated);
    }
  }
}

TEST_CASE("memory plan: the pipeline layer ranges it reads from the model manifest", "[memory_plan]") {
  using R = std::vector<std::vector<std::pair<int64_t, int64_t>>>;
  // The model manifest's chunks, what the planner reads (and the model builds).
  auto ranges = [](ParallelConfig p, int64_t layers) {
    p.world_size = p.pipeline_model_parallel_size;
    finalize_parallel_config(p, std::nullopt);
    ModelConfig raw_m;
    raw_m.num_layers = layers;
    raw_m.hidden_size = 16;
    raw_m.num_attention_heads = 4;
    const ResolvedModelConfig m(raw_m);
    R out;
    for (const auto& stage : build_model_manifest(m, p).chunks) {
      out.emplace_back();
      for (const auto& c : stage) out.back().push_back({c.first, c.count});
    }
    return out;
  };
  ParallelConfig p;
  p.pipeline_model_parallel_size = 4;
  // Megatron's docstring: 16 layers, pp 4, vpp 2 → GPU0 [1,2] [9,10], GPU1 [3,4] [11,12] … (1-based).
  p.virtual_pipeline_model_parallel_size = 2;
  CHECK(ranges(p, 16) == R{{{0, 2}, {8, 2}}, {{2, 2}, {10, 2}}, {{4, 2}, {12, 2}}, {{6, 2}, {14, 2}}});
  p.virtual_pipeline_model_parallel_size.reset();
  CHECK(ranges(p, 16) == R{{{0, 4}}, {{4, 4}}, {{8, 4}}, {{12, 4}}});
  // Uneven: 10 layers, first 1, last 3 → 1, 3, 3, 3.
  p.num_layers_in_first_pipeline_stage = 1;
  p.num_layers_in_last_pipeline_stage = 3;
  CHECK(ranges(p, 10) == R{{{0, 1}}, {{1, 3}}, {{4, 3}}, {{7, 3}}});
  // Uneven with interleaving: 12 layers, pp 2, vpp 2, first 4, last 8 → chunks of 2 and 4.
  ParallelConfig q;
  q.pipeline_model_parallel_size = 2;
  q.virtual_pipeline_model_parallel_size = 2;
  q.num_layers_in_first_pipeline_stage = 4;
  q.num_layers_in_last_pipeline_stage = 8;
  CHECK(ranges(q, 12) == R{{{0, 2}, {6, 2}}, {{2, 4}, {8, 4}}});
}

TEST_CASE("memory plan: activation bytes follow Korthikanti et al. with fused attention on hand-computed numbers",
          "[memory_plan]") {
  ModelConfig raw_m;
  raw_m.hidden_size = 1024;
  raw_m.num_attention_heads = 16;
  raw_m.seq_length = 2048;
  raw_m.vocab_size = 50000;
  const ResolvedModelConfig m(raw_m);
  // s = 2048, b = 2, h = 1024, a = 16: sbh = 4,194,304; the log-sum-exp 4·a·s·b = 262,144.
  // bf16, tp 1: 34·sbh + 4asb = 142,868,480; full recompute 2sbh = 8,388,608.
  const int64_t sbh = 4194304, lse = 262144;
  ActivationSizes a = activation_sizes(m, 1, 1, false, 2, 2, 50176);
  CHECK(a.per_layer == 142868480);
  CHECK(a.per_layer_recompute == 8388608);
  CHECK(a.output_layer == 4LL * 2048 * 2 * (1024 + 50176));  // f32 logits + output-layer input
  // tp 4 with sp: everything / 4.
  a = activation_sizes(m, 4, 1, true, 2, 2, 50176);
  CHECK(a.per_layer == 142868480 / 4);
  CHECK(a.per_layer_recompute == 8388608 / 4);
  // tp 4 without sp: 10·sbh + (24·sbh + lse)/4.
  CHECK(activation_sizes(m, 4, 1, false, 2, 2, 50176).per_layer == 10 * sbh + (24 * sbh + lse) / 4);
  // f32 activations (e = 4): 18·sbh + 48·sbh + lse.
  CHECK(activation_sizes(m, 1, 1, false, 2, 4, 50176).per_layer == 66 * sbh + lse);
  // cp 2: the rank's sequence is s/2: sbh and the log-sum-exp halve.
  CHECK(activation_sizes(m, 1, 2, false, 2, 2, 50176).per_layer == 34 * sbh / 2 + lse / 2);
}

TEST_CASE("memory plan: micro-batches in flight and the bubble", "[memory_plan]") {
  // 1F1B: stage i holds min(m, pp − i).
  CHECK(in_flight_micro_batches(0, 4, 1, 8) == 4);
  CHECK(in_flight_micro_batches(3, 4, 1, 8) == 1);
  CHECK(in_flight_micro_batches(0, 4, 1, 2) == 2);
  CHECK(in_flight_micro_batches(0, 1, 1, 16) == 1);
  // Interleaved: Megatron's warmup 2(pp − i − 1) + (vpp − 1)·pp, plus one; at most m·vpp.
  CHECK(in_flight_micro_batches(0, 4, 2, 8) == 11);
  CHECK(in_flight_micro_batches(3, 4, 2, 8) == 5);
  CHECK(in_flight_micro_batches(0, 4, 2, 4) == 8);

  const ResolvedConfig cfg = run_config({"parallel.world_size=8", "parallel.pipeline_model_parallel_size=4",
                                         "parallel.virtual_pipeline_model_parallel_size=2"});
  const LayoutPlan p = plan_layout(cfg);
  CHECK(p.dp == 2);
  CHECK(p.num_micro_batches == 8);
  CHECK(p.bubble_fraction == Approx(3.0 / 16.0));
  CHECK(plan_layout(run_config({"parallel.world_size=4", "parallel.pipeline_model_parallel_size=4"})).bubble_fraction ==
        Approx(3.0 / 16.0));  // m = 32/(2·1) = 16 micro-batches
  CHECK(plan_layout(run_config({})).bubble_fraction == 0.0);
}

TEST_CASE("memory plan: per-rank parameters and memory of a layout", "[memory_plan]") {
  // h 64, 8 layers, vocab 1000 → padded 1024 at tp 1 and 2; tied; LayerNorm; learned positions.
  const ResolvedConfig one = run_config({});
  const LayoutPlan p1 = plan_layout(one);
  const int64_t layer = 12 * 64 * 64 + 13 * 64, emb = 1024 * 64, pos = 64 * 64, fnorm = 128;
  REQUIRE(p1.stages.size() == 1);
  CHECK(p1.model_parameters == emb + pos + 8 * layer + fnorm);
  CHECK(p1.stages[0].parameters.total() == p1.model_parameters);
  // fp32, no distributed optimizer: 4 (weights) + 4 (grads) + 8 (Adam) bytes per parameter.
  CHECK(p1.stages[0].memory.static_bytes() == 16 * p1.model_parameters);
  CHECK(p1.stages[0].memory.main_params == 0);

  // tp 2, pp 2 (tied: the last stage holds its own copy of the word embeddings), dp 2, bf16,
  // distributed optimizer over dp·cp = 2.
  const ResolvedConfig cfg = run_config({"parallel.world_size=8", "parallel.tensor_model_parallel_size=2",
                                         "parallel.pipeline_model_parallel_size=2", "parallel.sequence_parallel=true",
                                         "parallel.use_distributed_optimizer=true", "training.precision=bf16"});
  const LayoutPlan p = plan_layout(cfg);
  REQUIRE(p.stages.size() == 2);
  const int64_t layer_tp2 = (12 * 64 * 64 + 7 * 64) / 2 + 6 * 64;  // sharded half + replicated
  const int64_t emb_tp2 = 1024 / 2 * 64;
  CHECK(p.stages[0].parameters.total() == 4 * layer_tp2 + emb_tp2 + pos);
  CHECK(p.stages[1].parameters.total() == 4 * layer_tp2 + emb_tp2 + fnorm);
  const int64_t n0 = p.stages[0].parameters.total();
  CHECK(p.stages[0].memory.weights == 2 * n0);
  CHECK(p.stages[0].memory.grads == 4 * n0);
  CHECK(p.stages[0].memory.main_params == 4 * ((n0 + 1) / 2));
  CHECK(p.stages[0].memory.optimizer == 8 * ((n0 + 1) / 2));
  // Activations: stage 0 of 1F1B holds min(m, pp) = 2 micro-batches of 4 layers; bf16, sp:
  // sbh = 64·2·64, per layer (34·sbh + 4·a·s·b)/2 with a = 8, s = 64, b = 2.
  const int64_t sbh = 64 * 2 * 64, per_layer = (34 * sbh + 4 * 8 * 64 * 2) / 2;
  CHECK(p.num_micro_batches == 8);
  CHECK(p.stages[0].in_flight == 2);
  CHECK(p.stages[0].memory.activations == 2 * 4 * per_layer);
  CHECK(p.stages[0].memory.activations_recompute == 2 * 4 * (2 * sbh / 2) + per_layer);
  CHECK(p.stages[1].in_flight == 1);
  CHECK(p.stages[1].memory.activations == 4 * per_layer + 4 * 64 * 2 * (64 + 1024) / 2);
  CHECK(p.peak_stage(false).stage == 0);

  // MTP (one module, untied) on the last stage: enorm, hnorm, final norm, eh_proj [h/2, 2h], a
  // layer, and the copy of the word embeddings its lookup uses.
  const LayoutPlan mp = plan_layout(run_config({"parallel.world_size=8", "parallel.tensor_model_parallel_size=2",
                                                "parallel.pipeline_model_parallel_size=2",
                                                "model.position_embedding_type=rope", "model.mtp_num_layers=1",
                                                "model.untie_embeddings_and_output_weights=true"}));
  const int64_t mtp_module = 3 * 128 + 32 * 128 + layer_tp2;
  CHECK(mp.stages[0].parameters.total() == 4 * layer_tp2 + emb_tp2);
  CHECK(mp.stages[1].parameters.total() == 4 * layer_tp2 + emb_tp2 + fnorm + mtp_module + emb_tp2);
}

}  // namespace strata

namespace strata {

TEST_CASE("memory plan: MoE models at tp=1 count what the real GPTModel allocates", "[memory_plan]") {
  auto moe = [](std::function<void(ModelConfig&)> edit) {
    return small([&](ModelConfig& m) {
      m.add_bias_linear = false;
      m.num_experts = 4;
      m.moe_ffn_hidden_size = 24;
      m.moe_router_topk = 2;
      edit(m);
    });
  };
  const std::vector<ResolvedModelConfig> variants = {
      moe([](ModelConfig&) {}),  // LayerNorm, GeLU, every layer MoE
      moe([](ModelConfig& m) {   // SwiGLU, RMSNorm, shared expert with its gate, dense first layer
        m.swiglu = true;
        m.normalization = Normalization::RMSNorm;
        m.moe_shared_expert_intermediate_size = 40;
        m.moe_shared_expert_gate = true;
        m.moe_layer_freq = {"[0, 1, 1]"};
      }),
      moe([](ModelConfig& m) {  // sigmoid scores with the expert bias (a buffer, not a parameter), freq 2
        m.moe_router_score_function = MoeScoreFunction::Sigmoid;
        m.moe_router_enable_expert_bias = true;
        m.moe_layer_freq = {"2"};
      }),
  };
  for (const ResolvedModelConfig& m : variants) CHECK(model_parameter_total(m) == model_parameter_count(m));
}

TEST_CASE("memory plan: MoE per-rank parameters under EP, optimizer sharding and all-to-all bytes", "[memory_plan]") {
  // h 64, 8 layers, MoE on layers 0, 2, 4, 6 (freq 2): 8 experts of F = 32 (GeLU), top-2; no biases.
  const ResolvedConfig cfg =
      run_config({"model.num_experts=8", "model.moe_ffn_hidden_size=32", "model.moe_router_topk=2",
                  "model.moe_layer_freq=2", "model.add_bias_linear=false", "parallel.world_size=8",
                  "training.precision=bf16", "parallel.use_distributed_optimizer=true"});
  const LayoutPlan one = plan_layout(cfg);  // 8 ranks of dp: tp = ep = 1
  const int64_t dense_tp1 = 256 + 3 * 4096 + 4096 + 2 * 16384;     // 2 LayerNorms, qkv, proj, fc1, fc2
  const int64_t moe_tp1 = 256 + 4 * 4096 + 8 * 64 + 8 * 2 * 32 * 64;  // norms, attention, router, 8 experts
  CHECK(one.model_parameters == 4 * dense_tp1 + 4 * moe_tp1 + 1024 * 64 + 64 * 64 + 128);
  CHECK(one.stages[0].parameters.total() == one.model_parameters);
  CHECK(one.stages[0].parameters.expert == 4 * 8 * 2 * 32 * 64);
  CHECK(one.all_to_all_bytes_per_layer == 0);  // ep 1: nothing leaves the rank
  // The layout the lead's expert parallelism will run: tp 2 with sp, ep 4, etp 1 (the resolved
  // fields edited and validated again).
  StrataConfig fields = cfg.fields();
  fields.parallel.tensor_model_parallel_size = 2;
  fields.parallel.sequence_parallel = true;
  fields.parallel.expert_model_parallel_size = 4;
  fields.parallel.expert_tensor_parallel_size = 1;
  fields.training.global_batch_size = 32;  // dp 4: 4 micro-batches of 2
  const LayoutPlan p = plan_layout(fields.validate(8));
  CHECK(p.dp == 4);
  CHECK(p.expert_dp == 2);  // 8 / (etp 1 · ep 4 · pp 1)
  CHECK(p.local_experts == 2);
  const StagePlan& s = p.stages.at(0);
  CHECK(s.moe_layers == 4);
  // dense layer at tp 2: norms 256 replicated; qkv 6144 + proj 2048 + fc1 8192 + fc2 8192 sharded.
  // MoE layer: the attention's 8192 sharded; 128 + 128 (norms) + 512 (router) replicated; 2 local
  // experts of (32·64 + 64·32) expert parameters.
  const int64_t dense_layer = 256 + 6144 + 2048 + 8192 + 8192, moe_dense = 8192 + 768, moe_expert = 2 * 2 * 32 * 64;
  const int64_t emb = 1024 / 2 * 64, pos = 64 * 64, fnorm = 128;
  CHECK(s.parameters.expert == 4 * moe_expert);
  CHECK(s.parameters.dense() == 4 * dense_layer + 4 * moe_dense + emb + pos + fnorm);  // 172160
  CHECK(s.parameters.dense() == 172160);
  // bf16 weights, f32 grads; the distributed optimizer: dense state / (dp 4 · cp 1), expert / 2.
  const int64_t n = 172160 + 32768, shard = 172160 / 4 + 32768 / 2;
  CHECK(s.memory.weights == 2 * n);
  CHECK(s.memory.grads == 4 * n);
  CHECK(s.memory.main_params == 4 * shard);
  CHECK(s.memory.optimizer == 8 * shard);
  // All-to-all: tokens 2 · 64 / tp 2 (sp) = 64, top-2, h 64, 2 bytes, 4 passes, 3/4 leave the rank.
  CHECK(p.all_to_all_bytes_per_layer == 4 * 64 * 2 * 64 * 2 * 3 / 4);
  CHECK(p.all_to_all_bytes_per_layer == 49152);
  CHECK(p.num_micro_batches == 4);
  CHECK(s.all_to_all_bytes_per_step == 4 * 4 * 49152);  // 4 MoE layers x 4 micro-batches
  // Expert tensor parallelism splits each expert's fc1 and fc2.
  fields.parallel.expert_tensor_parallel_size = 2;
  const ResolvedConfig etp2 = fields.validate(8);
  const LayoutPlan e2 = plan_layout(etp2);
  CHECK(e2.expert_dp == 1);
  CHECK(e2.stages[0].parameters.expert == 4 * moe_expert / 2);
  CHECK(moe_layers_in(etp2.model, 1, 4) == 2);  // layers 2 and 4
}

}  // namespace strata
