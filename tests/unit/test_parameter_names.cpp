// Tests of models/parameter_names.h (CanonicalParameterNameMap, layer_of, checkpoint_parameter_name):
// the rules of Megatron's parameter_names.py case by case on hand-built Parameters, the error
// cases, the checkpoint writer's duplicate check, GPT MTP names (module path vs checkpoint name),
// and the same name set under ten parallel layouts, each layer's parameters on the stage and
// chunk its model manifest names (real model chunks of every rank of a layout,
// built without MPI from hand-set ParallelGroups whose communicators refuse every collective).
#include "test_helpers.h"
#include "trainer_test_support.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/model_manifest.h"
#include "models/parameter_names.h"
#include "parallel/communicator.h"
#include "parallel/rank_grid.h"
#include "training/checkpointing/checkpoint.h"
#include "training/config/config.h"
#include "training/config/model_factory.h"
#include "training/checkpointing/tensor_file.h"

namespace strata {
namespace {

Parameter named(const std::string& name, bool shared_copy = false) {
  Parameter p;
  p.name = name;
  p.shared_copy = shared_copy;
  return p;
}

void check_throws_with(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL("no error");
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& s : parts) {
      INFO(what);
      CHECK(what.find(s) != std::string::npos);
    }
  }
}

}  // namespace

TEST_CASE("parameter names: order, lookups and the layer label", "[parameter_names]") {
  Parameter a = named("embedding.word_embeddings.weight"), b = named("decoder.layers.3.mlp.linear_fc1.weight"),
            c = named("decoder.layers.4.self_attention.linear_qkv.weight"), d = named("output_layer.weight");
  const CanonicalParameterNameMap m({{&a, &b}, {&c, &d}}, 0, 1, 0);
  CHECK(m.names() == std::vector<std::string>{a.name, b.name, c.name, d.name});
  CHECK(m.parameters() == std::vector<Parameter*>{&a, &b, &c, &d});
  CHECK(m.name_of(&c) == c.name);
  CHECK(m.find(b.name) == &b);
  CHECK(m.find("decoder.layers.9.mlp.linear_fc1.weight") == nullptr);
  CHECK(m.chunk_of(a.name) == 0);
  CHECK(m.chunk_of(d.name) == 1);
  CHECK(m.chunk_of("nope") == -1);
  Parameter stranger = named("x");
  check_throws_with([&] { m.name_of(&stranger); }, {"'x'", "not a parameter of these model chunks"});

  CHECK(layer_of("decoder.layers.3.mlp.router.weight") == std::optional<std::string>("decoder.layers.3"));
  CHECK(layer_of("decoder.layers.12") == std::optional<std::string>("decoder.layers.12"));
  CHECK(layer_of("mtp.layers.0.transformer_layer.layers.2.x") ==
        std::optional<std::string>("mtp.layers.0.transformer_layer.layers.2"));  // innermost
  CHECK(layer_of("mtp.layers.1.enorm.weight") == std::optional<std::string>("mtp.layers.1"));
  CHECK(layer_of("output_layer.weight") == std::nullopt);
  CHECK(layer_of("decoder.layers.x.weight") == std::nullopt);
  CHECK(layer_of("decoder.mylayers.3.weight") == std::nullopt);  // the segment must be "layers"
}

TEST_CASE("parameter names: experts inside this EP rank's range, shared experts untouched", "[parameter_names]") {
  // 8 experts over ep 4: rank 2 holds global experts [4, 6).
  Parameter e4 = named("decoder.layers.1.mlp.experts.linear_fc1.weight4"),
            e5 = named("decoder.layers.1.mlp.experts.linear_fc2.weight5"),
            s0 = named("decoder.layers.1.mlp.shared_experts.linear_fc1.weight"),
            sq = named("decoder.layers.1.mlp.experts.local_experts.5.linear_fc1.weight");
  const CanonicalParameterNameMap m({{&e4, &e5, &s0, &sq}}, 2, 4, 8);
  CHECK(m.names() == std::vector<std::string>{e4.name, e5.name, s0.name, sq.name});

  Parameter outside = named("decoder.layers.1.mlp.experts.linear_fc1.weight6");
  check_throws_with([&] { CanonicalParameterNameMap({{&e4, &outside}}, 2, 4, 8); },
                    {"linear_fc1.weight6", "global id 6", "[4, 6)"});
  Parameter seq_outside = named("decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.weight");
  check_throws_with([&] { CanonicalParameterNameMap({{&seq_outside}}, 2, 4, 8); }, {"global id 3", "[4, 6)"});
  // ep rank 0 holds [0, 2): a "weight4" there is someone else's expert
  check_throws_with([&] { CanonicalParameterNameMap({{&e4}}, 0, 4, 8); }, {"global id 4", "[0, 2)"});
  // shared experts whatever their suffix are never experts
  Parameter s9 = named("decoder.layers.1.mlp.shared_experts.linear_fc1.weight9");
  CHECK(CanonicalParameterNameMap({{&s9}}, 0, 4, 8).names() == std::vector<std::string>{s9.name});
}

TEST_CASE("parameter names: a single grouped expert tensor gets its expert range under EP", "[parameter_names]") {
  Parameter g = named("decoder.layers.0.mlp.experts.linear_fc1.weight");
  const CanonicalParameterNameMap ep2({{&g}}, 1, 2, 4);
  CHECK(ep2.names() == std::vector<std::string>{"decoder.layers.0.mlp.experts.linear_fc1.weight[experts=2:4]"});
  CHECK(ep2.name_of(&g) == "decoder.layers.0.mlp.experts.linear_fc1.weight[experts=2:4]");
  CHECK(ep2.find("decoder.layers.0.mlp.experts.linear_fc1.weight[experts=2:4]") == &g);
  const CanonicalParameterNameMap ep1({{&g}}, 0, 1, 4);
  CHECK(ep1.names() == std::vector<std::string>{g.name});  // the whole tensor: no suffix
}

TEST_CASE("parameter names: tied parameters and shared copies are named once", "[parameter_names]") {
  Parameter emb = named("embedding.word_embeddings.weight"), n = named("decoder.final_layernorm.weight");
  // the same Parameter in two chunks (and twice in one): listed once, at its first place
  const CanonicalParameterNameMap tied({{&emb, &n, &emb}, {&emb}}, 0, 1, 0);
  CHECK(tied.names() == std::vector<std::string>{emb.name, n.name});
  CHECK(tied.chunk_of(emb.name) == 0);
  // the last stage's copy of the tied embeddings: not listed (its owner's rank lists the name)
  Parameter copy = named("embedding.word_embeddings.weight", true);
  const CanonicalParameterNameMap last({{&n, &copy}}, 0, 1, 0);
  CHECK(last.names() == std::vector<std::string>{n.name});
  CHECK(last.find(copy.name) == nullptr);
  CHECK(last.name_of(&copy) == "embedding.word_embeddings.weight");
}

TEST_CASE("parameter names: the error cases", "[parameter_names]") {
  Parameter a = named("decoder.layers.0.mlp.linear_fc1.weight"), a2 = named("decoder.layers.0.mlp.linear_fc1.weight");
  check_throws_with([&] { CanonicalParameterNameMap({{&a}}, 0, 0, 0); }, {"expert-parallel size 0"});
  check_throws_with([&] { CanonicalParameterNameMap({{&a}}, 2, 2, 0); }, {"expert-parallel rank 2", "[0, 2)"});
  check_throws_with([&] { CanonicalParameterNameMap({{&a}}, -1, 2, 0); }, {"expert-parallel rank -1"});
  check_throws_with([&] { CanonicalParameterNameMap(std::vector<std::vector<Parameter*>>{}, 0, 1, 0); },
                    {"no model chunks"});
  check_throws_with([&] { CanonicalParameterNameMap(std::vector<LanguageModel*>{}, 0, 1); }, {"no model chunks"});
  check_throws_with([&] { CanonicalParameterNameMap({{&a}}, 0, 4, 6); },
                    {"num_experts 6", "not divisible by the expert-parallel size 4"});
  // two Parameters with one name: both named (their chunks)
  check_throws_with([&] { CanonicalParameterNameMap({{&a}, {&a2}}, 0, 1, 0); },
                    {"duplicate parameter name 'decoder.layers.0.mlp.linear_fc1.weight'", "model chunk 0",
                     "model chunk 1"});
  check_throws_with([&] { CanonicalParameterNameMap({{&a, &a2}}, 0, 1, 0); }, {"duplicate parameter name"});
  Parameter unnamed = named("");
  check_throws_with([&] { CanonicalParameterNameMap({{&unnamed}}, 0, 1, 0); }, {"without a name"});
}

TEST_CASE("parameter names: the checkpoint writer refuses two parameters with one name", "[parameter_names]") {
  Parameter a = named("decoder.final_layernorm.weight"), b = named("decoder.final_layernorm.weight");
  a.value = Tensor::zeros({2}, DType::F32, Device::cpu());
  b.value = Tensor::zeros({2}, DType::F32, Device::cpu());
  a.global_shape = b.global_shape = Shape{2};
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "strata_test_parameter_names_ckpt";
  std::filesystem::remove_all(dir);
  std::unique_ptr<TensorFileIO> io = make_default_tensor_file_io();
  CheckpointState st;
  check_throws_with([&] { save_checkpoint(dir.string(), st, {&a, &b}, nullptr, *io); },
                    {"duplicate parameter name 'decoder.final_layernorm.weight'"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("parameter names: MTP inner layers follow Megatron's module path, checkpoints its checkpoint names",
          "[parameter_names][mtp]") {
  // Megatron's MultiTokenPredictionLayer holds its layer as mtp_model_layer; only the GPT checkpoint
  // mapping (sharded_state_dict) renames it transformer_layer. Hybrid MTP stacks keep the path.
  CHECK(checkpoint_parameter_name("mtp.layers.1.mtp_model_layer.mlp.linear_fc1.weight") ==
        "mtp.layers.1.transformer_layer.mlp.linear_fc1.weight");
  CHECK(checkpoint_parameter_name("mtp.layers.0.mtp_model_layer.layers.2.mixer.in_proj.weight") ==
        "mtp.layers.0.mtp_model_layer.layers.2.mixer.in_proj.weight");
  CHECK(checkpoint_parameter_name("mtp.layers.0.eh_proj.weight") == "mtp.layers.0.eh_proj.weight");
  CHECK(checkpoint_parameter_name("decoder.layers.0.mlp.linear_fc1.weight") == "decoder.layers.0.mlp.linear_fc1.weight");

  const ResolvedConfig cfg =
      test::tiny_config({"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4",
                         "model.vocab_size=50", "model.position_embedding_type=rope", "model.mtp_num_layers=2"});
  std::unique_ptr<LanguageModel> model = make_model(cfg, Device::cpu());
  model->init_parameters(5);
  const CanonicalParameterNameMap names({model.get()}, 0, 1);
  const std::set<std::string> all(names.names().begin(), names.names().end());
  for (const char* n : {"mtp.layers.0.mtp_model_layer.self_attention.linear_qkv.weight",
                        "mtp.layers.1.mtp_model_layer.mlp.linear_fc2.weight"})
    CHECK(all.count(n) == 1);
  for (const std::string& n : all) CHECK(n.find("transformer_layer") == std::string::npos);

  // The checkpoint holds Megatron's names and loads back into the model.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "strata_test_parameter_names_mtp_ckpt";
  std::filesystem::remove_all(dir);
  std::unique_ptr<TensorFileIO> io = make_default_tensor_file_io();
  CheckpointState st;
  st.iteration = 3;
  save_checkpoint(dir.string(), st, model->parameters(), nullptr, *io);
  std::ifstream in(dir / "iter_0000003" / "manifest.json");
  const std::string manifest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(manifest.find("\"mtp.layers.1.transformer_layer.mlp.linear_fc2.weight\"") != std::string::npos);
  CHECK(manifest.find("mtp_model_layer") == std::string::npos);
  std::unique_ptr<LanguageModel> loaded = make_model(cfg, Device::cpu());
  loaded->init_parameters(6);
  CheckpointLoadOptions lo;
  lo.load_optimizer = false;
  load_checkpoint(dir.string(), loaded->parameters(), nullptr, *io, lo);
  const std::vector<Parameter*> a = model->parameters(), b = loaded->parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(test::max_abs_diff(a[i]->value, b[i]->value) == 0.0);
  std::filesystem::remove_all(dir);
}

namespace {

// A communicator of a given size and position that refuses every collective: model construction
// needs only the group shapes.
class ShapeOnlyCommunicator : public Communicator {
 public:
  ShapeOnlyCommunicator(int size, int rank) : size_(size), rank_(rank) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const char* backend() const override { return "shape_only"; }
  DeviceType device_type() const override { return DeviceType::CPU; }
  void all_reduce(Tensor&, ReduceOp) override { refuse(); }
  void reduce_scatter(const Tensor&, Tensor&, ReduceOp) override { refuse(); }
  void all_gather(const Tensor&, Tensor&) override { refuse(); }
  void all_gather_v(const Tensor&, Tensor&, const std::vector<int64_t>&) override { refuse(); }
  void all_to_all(const Tensor&, Tensor&) override { refuse(); }
  void all_to_all_v(const Tensor&, const std::vector<int64_t>&, Tensor&, const std::vector<int64_t>&) override {
    refuse();
  }
  void broadcast(Tensor&, int) override { refuse(); }
  void batch_send_recv(std::vector<PointToPoint>&) override { refuse(); }
  void barrier() override { refuse(); }
  std::shared_ptr<Communicator> split(int, int) override { refuse(); }

 private:
  [[noreturn]] static void refuse() { throw std::runtime_error("shape-only communicator: no collectives"); }
  int size_, rank_;
};

// Rank r's ParallelGroups of a layout, as build_parallel_groups would give them, without MPI.
ParallelGroups groups_of(const RankGrid& g, int r) {
  ParallelGroups out;
  out.world_size = g.world_size();
  out.global_rank = r;
  auto make = [&](GroupKind k) {
    const std::string name = group_kind_name(k);
    if (g.group_index(k, r) < 0 || g.group_of(k, r).size() == 1) return ProcessGroup::single(name, r);
    const std::vector<int>& ranks = g.group_of(k, r);
    return ProcessGroup(name, ranks, r,
                        std::make_shared<ShapeOnlyCommunicator>(static_cast<int>(ranks.size()), g.position(k, r)));
  };
  std::vector<int> all(g.world_size());
  for (int i = 0; i < g.world_size(); ++i) all[i] = i;
  if (g.world_size() > 1)
    out.world = ProcessGroup("world", all, r, std::make_shared<ShapeOnlyCommunicator>(g.world_size(), r));
  out.tp = make(GroupKind::Tp), out.cp = make(GroupKind::Cp), out.ep = make(GroupKind::Ep);
  out.dp = make(GroupKind::Dp), out.pp = make(GroupKind::Pp), out.dp_cp = make(GroupKind::DpCp);
  out.tp_cp = make(GroupKind::TpCp), out.mp = make(GroupKind::Mp), out.embedding = make(GroupKind::Embedding);
  out.position_embedding = make(GroupKind::PositionEmbedding), out.expert_tp = make(GroupKind::ExpertTp);
  out.expert_dp = make(GroupKind::ExpertDp), out.tp_ep = make(GroupKind::TpEp), out.tp_dp_cp = make(GroupKind::TpDpCp);
  out.in_embedding_group = g.group_index(GroupKind::Embedding, r) >= 0;
  out.in_position_embedding_group = g.group_index(GroupKind::PositionEmbedding, r) >= 0;
  return out;
}

ResolvedConfig layout_config(bool moe, int world, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {
      "model.num_layers=4", "model.hidden_size=16", "model.num_attention_heads=4", "model.vocab_size=64",
      "model.make_vocab_size_divisible_by=16", "model.seq_length=8", "model.max_position_embeddings=8",
      "training.micro_batch_size=1", "training.global_batch_size=8", "training.train_iters=1"};
  if (moe)
    o.insert(o.end(), {"model.num_experts=4", "model.moe_ffn_hidden_size=8", "model.moe_router_topk=2",
                       "model.moe_shared_expert_intermediate_size=8", "model.add_bias_linear=false"});
  o.insert(o.end(), extra.begin(), extra.end());
  StrataConfig cfg = StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n", o,
                                                  "names.yaml");
  return cfg.validate(world);
}

struct Listed {
  std::set<std::pair<int, int>> stage_chunks;  // (pp rank, chunk) that list the name
  std::set<int> ranks, ep_ranks;
  Shape global_shape;
  bool expert = false;
};

// Every rank's map of a layout: the union of names is the single-rank set, each name listed by
// exactly one (pp rank, chunk), by one ep rank when an expert, and by every tp/cp/dp replica.
void check_layout(bool moe, int world, const std::vector<std::string>& extra) {
  INFO((moe ? "moe" : "gpt") << " world " << world);
  std::vector<std::string> model_extra;  // the model's own overrides (not the layout's)
  for (const std::string& e : extra)
    if (e.rfind("model.", 0) == 0) model_extra.push_back(e);
  const ResolvedConfig one = layout_config(moe, 1, model_extra);
  std::map<std::string, Shape> single;
  {
    auto chunks = make_model_chunks(one, Device::cpu(), ParallelGroups::single_process());
    const CanonicalParameterNameMap m({chunks.front().get()}, 0, 1);
    for (Parameter* p : m.parameters()) single[m.name_of(p)] = p->global_shape;
  }
  const ResolvedConfig cfg = layout_config(moe, world, extra);
  const ParallelConfig& pc = *cfg.parallel;
  const RankGrid grid = RankGrid::from_config(pc);
  std::map<std::string, Listed> seen;
  for (int r = 0; r < world; ++r) {
    const ParallelGroups groups = groups_of(grid, r);
    auto chunks = make_model_chunks(cfg, Device::cpu(), groups);
    std::vector<LanguageModel*> raw;
    for (auto& c : chunks) raw.push_back(c.get());
    const CanonicalParameterNameMap m(raw, groups.ep.rank(), groups.ep.size());
    for (size_t i = 0; i < m.size(); ++i) {
      Listed& l = seen[m.names()[i]];
      l.stage_chunks.insert({groups.pp.rank(), m.chunk_of(m.names()[i])});
      l.ranks.insert(r);
      l.ep_ranks.insert(groups.ep.rank());
      l.global_shape = m.parameters()[i]->global_shape;
      l.expert = m.parameters()[i]->expert_parallel;
    }
  }
  std::set<std::string> got, want;
  for (auto& [n, l] : seen) got.insert(n);
  for (auto& [n, s] : single) want.insert(n);
  CHECK(got == want);
  const int pp = static_cast<int>(pc.pipeline_model_parallel_size), ep = static_cast<int>(pc.expert_model_parallel_size);
  // The model manifest says which stage and chunk build each layer: the chunks that list a
  // layer's parameters.
  const ModelManifest manifest = build_model_manifest(cfg.model, pc);
  auto layer_of_name = [&](const std::string& n) -> const ManifestLayer* {
    const ManifestLayer* best = nullptr;
    for (const ManifestLayer& layer : manifest.layers)
      if (n.rfind(layer.name + ".", 0) == 0 && (!best || layer.name.size() > best->name.size())) best = &layer;
    return best;
  };
  int layer_params = 0;
  for (auto& [n, l] : seen) {
    INFO(n);
    CHECK(l.stage_chunks.size() == 1);
    if (const ManifestLayer* layer = layer_of_name(n)) {
      ++layer_params;
      CHECK(l.stage_chunks == std::set<std::pair<int, int>>{{static_cast<int>(layer->stage), static_cast<int>(layer->chunk)}});
    }
    CHECK(static_cast<int>(l.ranks.size()) == (l.expert ? world / pp / ep : world / pp));
    if (l.expert) CHECK(l.ep_ranks.size() == 1);
    if (single.count(n)) CHECK(l.global_shape == single[n]);
  }
  CHECK(layer_params > 0);
  if (moe) CHECK(want.count("decoder.layers.3.mlp.experts.linear_fc2.weight3") == 1);
}

}  // namespace

TEST_CASE("parameter names: the same name set under ten layouts", "[parameter_names]") {
  const std::vector<std::string> none;
  for (bool moe : {false, true}) {
    check_layout(moe, 1, none);
    check_layout(moe, 2, {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"});
    check_layout(moe, 2, {"parallel.pipeline_model_parallel_size=2"});
    check_layout(moe, 2, {"parallel.pipeline_model_parallel_size=2", "parallel.virtual_pipeline_model_parallel_size=2"});
    check_layout(moe, 2, {"parallel.context_parallel_size=2"});
    check_layout(moe, 2, none);  // dp2
  }
  // MTP layers are built on the last stage's last chunk.
  check_layout(false, 2, {"parallel.pipeline_model_parallel_size=2", "model.mtp_num_layers=1",
                          "model.position_embedding_type=rope"});
  check_layout(true, 2, {"parallel.expert_model_parallel_size=2"});
  check_layout(true, 4, {"parallel.expert_model_parallel_size=4"});
  check_layout(true, 4, {"parallel.expert_model_parallel_size=2", "parallel.expert_tensor_parallel_size=2"});
  check_layout(true, 4, {"parallel.tensor_model_parallel_size=2", "parallel.expert_model_parallel_size=2",
                         "parallel.sequence_parallel=true"});
}

}  // namespace strata
