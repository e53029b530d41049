// The model manifest's parameters (models/model_manifest.h) against what every rank builds under
// mpirun: for GPT, GPT+MoE, hybrid, GPT/hybrid MTP and GPT/hybrid mHC, under TP2 (+SP), PP2,
// PP2 with VPP2, EP2 (2 ranks) and TP2×PP2 with VPP, TP2×EP2 with expert TP 1 (4 ranks), each
// model chunk builds exactly the manifest's parameters for its stage and chunk (the experts of its
// ep rank, the last stage's copies of the word embeddings): names, global shapes, tp shards, f32.
// And one training step under an observer of every source kind emits, on each rank, exactly the
// manifest's sites of the layers its stage builds (the output layer's on the last stage).
// ctest mpi_manifest_np2 ([manifest2]) and mpi_manifest_np4 ([manifest4]).
#include <set>
#include <string>
#include <vector>

#include "core/observe.h"
#include "layout_check.h"
#include "manifest_check.h"
#include "models/model_manifest.h"
#include "training/config/model_factory.h"

namespace strata {
namespace {

const std::vector<std::string> kMoe = {"model.num_experts=4", "model.moe_ffn_hidden_size=16", "model.add_bias_linear=false",
                                       "model.moe_shared_expert_intermediate_size=16",
                                       "model.moe_router_enable_expert_bias=true",
                                       "model.moe_router_score_function=sigmoid"};
const std::vector<std::string> kMamba = {"model.mamba_head_dim=8", "model.mamba_num_groups=2",
                                         "model.mamba_state_dim=8", "model.mamba_chunk_size=8",
                                         "model.position_embedding_type=rope"};

std::vector<std::string> join(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The families at one layout: `hybrid_pattern` is the hybrid models' pattern with the stage
// segments the layout needs ("" when the layout has no hybrid case).
std::vector<std::vector<std::string>> families(const std::string& hybrid_pattern, const std::string& hybrid_mtp) {
  std::vector<std::vector<std::string>> f = {
      {},
      join({"model.moe_layer_freq=[0, 1, 0, 1]", "model.untie_embeddings_and_output_weights=true"}, kMoe),
      join({"model.mtp_num_layers=2", "model.moe_layer_freq=[0, 0, 0, 1]", "model.position_embedding_type=rope"},
           kMoe),
      {"model.mtp_num_layers=2", "model.untie_embeddings_and_output_weights=true", "model.qk_layernorm=true",
       "model.position_embedding_type=rope"},
      {"model.enable_hyper_connections=true", "model.num_residual_streams=2", "model.mtp_num_layers=1",
       "model.position_embedding_type=rope"},
  };
  if (!hybrid_pattern.empty()) {
    f.push_back(join(join({"model.hybrid_layer_pattern=\"" + hybrid_pattern + "\""}, kMamba), kMoe));
    f.push_back(join(join({"model.hybrid_layer_pattern=\"" + hybrid_mtp + "\"",
                           "model.enable_hyper_connections=true", "model.num_residual_streams=2"},
                          kMamba),
                     kMoe));
  }
  return f;
}

struct SiteRecorder : Observer {
  std::set<std::string> seen;
  void on_tensor(const Observation& o) override { seen.insert(std::string(o.owner) + "." + std::string(o.name)); }
};

// The manifest's sites of the layers on pipeline stage `stage`: a site belongs to the layer whose
// module path is the longest prefix of its owner; the output layer's are the last stage's.
std::set<std::string> stage_sites(const ModelManifest& m, int64_t stage, int64_t stages, SourceKinds kinds) {
  std::set<std::string> out;
  for (const ObservationSite& s : m.sites) {
    if (!kinds.contains(s.kind)) continue;
    const ManifestLayer* owner = nullptr;
    for (const ManifestLayer& l : m.layers)
      if ((s.owner == l.name || s.owner.rfind(l.name + ".", 0) == 0) &&
          (owner == nullptr || l.name.size() > owner->name.size()))
        owner = &l;
    if ((owner ? owner->stage : stages - 1) == stage) out.insert(s.path());
  }
  return out;
}

// One training step of this rank's chunks under an observer of `kinds`: the sites it emits.
std::set<std::string> emitted_sites(const ResolvedConfig& cfg, const ParallelGroups& groups, SourceKinds kinds) {
  std::vector<std::unique_ptr<LanguageModel>> chunks = make_model_chunks(cfg, Device::cpu(), groups);
  SiteRecorder rec;
  CaptureScope scope(rec, kinds);
  using NoInspect = std::function<void(Trainer&, std::vector<std::unique_ptr<LanguageModel>>&)>;
  mpitest::train_chunks(chunks, cfg, groups, mpitest::kVocab, false, NoInspect{}, nullptr);
  return rec.seen;
}

bool is_moe(const std::vector<std::string>& family) {
  for (const std::string& f : family)
    if (f.rfind("model.num_experts=", 0) == 0) return true;
  return false;
}

// moe_only: expert-parallel layouts, which a dense model rejects.
void check_layout(const std::vector<std::string>& layout, const std::string& hybrid_pattern,
                  const std::string& hybrid_mtp, bool moe_only = false) {
  const int world = mpitest::world().size();
  for (const std::vector<std::string>& family : families(hybrid_pattern, hybrid_mtp)) {
    if (moe_only && !is_moe(family)) continue;
    const ResolvedConfig cfg = mpitest::layout_config(
        join(join(family, layout), {"training.precision=bf16", "training.train_iters=1"}), world);
    INFO("rank " << mpitest::world().rank() << ": " << (family.empty() ? "gpt" : family.front()) << " "
                 << (layout.empty() ? "" : layout.front()));
    const ParallelGroups groups = build_parallel_groups(*cfg.parallel, mpitest::world_comm());
    const ModelManifest manifest = build_model_manifest(cfg.model, *cfg.parallel);
    test::RankPosition r;
    r.stage = groups.pp.rank(), r.tp = groups.tp.size(), r.etp = groups.expert_tp.size();
    r.ep = groups.ep.size(), r.ep_rank = groups.ep.rank(), r.num_experts = cfg.model->num_experts.value_or(0);
    r.bf16 = true;
    const auto chunks = make_model_chunks(cfg, Device::cpu(), groups);
    for (size_t c = 0; c < chunks.size(); ++c) {
      r.chunk = static_cast<int64_t>(c);
      INFO("chunk " << c);
      CHECK(test::built_parameter_lines(chunks[c]->parameters(), true) == test::manifest_parameter_lines(manifest, r));
    }
    // Every kind, but router_diagnostics under sequence parallelism: it needs whole local
    // sequences, and asking for it there is an error (as in Megatron).
    SourceKinds kinds;
    for (int i = 0; i < kNumSourceKinds; ++i)
      if (!(cfg.parallel->sequence_parallel && static_cast<SourceKind>(i) == SourceKind::RouterDiagnostics))
        kinds = kinds | SourceKinds{static_cast<SourceKind>(i)};
    CHECK(emitted_sites(cfg, groups, kinds) == stage_sites(manifest, r.stage, groups.pp.size(), kinds));
  }
}

}  // namespace

TEST_CASE("manifest layouts: every rank of TP2, PP2, PP2+VPP2 and EP2 builds the manifest's parameters",
          "[manifest2]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}, "M*E-", "M*E-/*E");
  check_layout({"parallel.pipeline_model_parallel_size=2"}, "M*|E-", "M*|E-/*E");
  check_layout({"parallel.pipeline_model_parallel_size=2", "parallel.virtual_pipeline_model_parallel_size=2"},
               "M*|E-|M|E", "M*|E-|M|E/*E");
  check_layout({"parallel.expert_model_parallel_size=2"}, "M*E-", "M*E-/*E", true);
}

TEST_CASE("manifest layouts: every rank of TP2×PP2 (+VPP2) and TP2×EP2 builds the manifest's parameters",
          "[manifest4]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                "parallel.pipeline_model_parallel_size=2", "parallel.virtual_pipeline_model_parallel_size=2"},
               "M*|E-|M|E", "M*|E-|M|E/*E");
  check_layout({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                "parallel.expert_model_parallel_size=2", "parallel.expert_tensor_parallel_size=1"},
               "M*E-", "M*E-/*E", true);
}

}  // namespace strata
