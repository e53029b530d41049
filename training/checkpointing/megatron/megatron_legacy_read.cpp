// Megatron-Core legacy (`--ckpt-format torch`) checkpoints: the rank files, the model tensors and
// the run state (see megatron_legacy_read.h); the optimizer states: megatron_legacy_optimizer.cpp.
// Reference: megatron/training/checkpointing.py (get_checkpoint_name, _load_base_checkpoint,
// load_checkpoint: state_dict['model'] / 'model%d', 'iteration', 'args', 'opt_param_scheduler',
// 'checkpoint_version'), megatron/core/tensor_parallel/layers.py (partition_dim),
// megatron/core/transformer/transformer_layer.py (get_transformer_layer_offset: a stage's layers
// follow the layers of the (virtual) stages before it).
#include "training/checkpointing/megatron/megatron_legacy_read.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <set>
#include <tuple>

#include "core/error.h"
#include "models/parameter_names.h"
#include "training/checkpointing/megatron/megatron_legacy_parts.h"
#include "training/checkpointing/megatron/megatron_names.h"

namespace strata {

namespace fs = std::filesystem;
using formats::PyRef;
using formats::PyValue;
using namespace megatron_legacy;

namespace megatron_legacy {

TorchFile::TorchFile(const std::string& path) : file(path), archive(file.data(), file.size(), path) {}

std::vector<int64_t> global_shape(const LocalTensor& t) {
  std::vector<int64_t> g = t.shape;
  if (t.shard.dim >= 0) g[static_cast<size_t>(t.shard.dim)] *= t.shard.parts;
  return g;
}

void add_local_tensor(StoredTensorTable& table, const std::string& table_name, const LocalTensor& t,
                      const std::shared_ptr<TorchFile>& pt, const formats::PyTensorRef& ref, const std::string& where) {
  const std::vector<int64_t> global = global_shape(t);
  StoredTensor& e = table[table_name];
  STRATA_IO_CHECK(e.pieces.empty() || e.shape == global, where, ": its global shape ", TensorBox{{}, global}.str(),
                  " differs from another rank file's ", TensorBox{{}, e.shape}.str(), " for '", table_name, "'");
  e.shape = global;
  // The local rows [r0, r0 + n) (dim 0) at global offset `at` along the shard dimension.
  auto add_rows = [&](int64_t r0, int64_t n, int64_t at) {
    formats::PyTensorRef part = ref;
    std::vector<int64_t> offsets(global.size(), 0), shape = t.shape;
    if (n != t.shape[0]) {
      part.offset += r0 * part.stride[0];
      part.size[0] = n;
      shape[0] = n;
    }
    if (t.shard.dim >= 0) offsets[static_cast<size_t>(t.shard.dim)] = at;
    e.pieces.push_back({where, "rows " + std::to_string(r0) + ".." + std::to_string(r0 + n), {offsets, shape},
                        [pt, part] { return pt->archive.tensor(part); }});
  };
  if (!t.shard.gated) {
    const int64_t local = t.shard.dim >= 0 ? t.shape[static_cast<size_t>(t.shard.dim)] : 0;
    add_rows(0, t.shape.empty() ? 1 : t.shape[0], t.shard.rank * local);
    return;
  }
  STRATA_IO_CHECK(t.shard.dim == 0 && t.shape[0] % 2 == 0, where, ": a gated linear unit's rows (", t.shape[0],
                  ") do not split into gate and up halves");
  const int64_t half = t.shape[0] / 2, global_half = half * t.shard.parts;
  add_rows(0, half, t.shard.rank * half);                 // gate rows of this rank
  add_rows(half, half, global_half + t.shard.rank * half);  // up rows of this rank
}

}  // namespace megatron_legacy

namespace {

const std::string kModelFile = "model_optim_rng.pt";

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

int64_t int_arg(const PyValue& args, const std::string& name, int64_t fallback) {
  const PyValue* v = args.attr(name);
  return v && v->is_int() ? v->integer : fallback;
}

bool bool_arg(const PyValue& args, const std::string& name) {
  const PyValue* v = args.attr(name);
  return v && v->kind == PyValue::Kind::Bool && v->boolean;
}

// "mp_rank_TT[_PPP][_EEE]" (Megatron's get_checkpoint_name).
std::string rank_dir_name(int64_t tp, int64_t pp, int64_t ep, bool pipelined, bool experts_parallel) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "mp_rank_%02lld", static_cast<long long>(tp));
  std::string s = buf;
  if (pipelined) {
    std::snprintf(buf, sizeof buf, "_%03lld", static_cast<long long>(pp));
    s += buf;
  }
  if (experts_parallel) {
    std::snprintf(buf, sizeof buf, "_%03lld", static_cast<long long>(ep));
    s += buf;
  }
  return s;
}

// The first rank file of a directory: mp_rank_00, mp_rank_00_000, …
std::string first_rank_file(const std::string& iteration_dir) {
  std::string best;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(iteration_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("mp_rank_", 0) == 0 && fs::exists(e.path() / kModelFile) && (best.empty() || n < best)) best = n;
  }
  STRATA_IO_CHECK(!best.empty(), iteration_dir, "holds no mp_rank_*/", kModelFile);
  return (fs::path(iteration_dir) / best / kModelFile).string();
}

const PyValue& root_dict(const RankFile& f) {
  STRATA_IO_CHECK(f.root->kind == PyValue::Kind::Dict, f.path, "holds a ", f.root->kind_name(), ", not a dict");
  return *f.root;
}

const PyValue& saved_args(const PyValue& root, const std::string& path) {
  const PyValue* args = root.find("args");
  STRATA_IO_CHECK(args && args->is_instance_of("argparse", "Namespace"), path, "has no saved args (key 'args')");
  return *args;
}

// The model chunks of a rank file: "model", or "model0", "model1", … (a virtual pipeline).
std::vector<const PyValue*> model_chunks(const RankFile& f) {
  const PyValue& root = root_dict(f);
  if (const PyValue* m = root.find("model")) return {m};
  std::vector<const PyValue*> out;
  for (int v = 0;; ++v) {
    const PyValue* m = root.find("model" + std::to_string(v));
    if (!m) break;
    out.push_back(m);
  }
  STRATA_IO_CHECK(!out.empty(), f.path, "has no model state (key 'model' or 'model0'; saved with --no-save-optim "
                  "only, or not a Megatron checkpoint)");
  for (const PyValue* m : out) STRATA_IO_CHECK(m->kind == PyValue::Kind::Dict, f.path, "'model' is a ", m->kind_name());
  return out;
}

// The number of decoder layers a model chunk holds (local numbers 0 … n-1).
int64_t chunk_layer_count(const PyValue& chunk, const std::string& where) {
  const std::string marker = "decoder.layers.";
  std::set<int64_t> layers;
  for (const auto& [k, v] : chunk.dict) {
    if (!k->is_str() || k->text.rfind(marker, 0) != 0) continue;
    const size_t end = k->text.find('.', marker.size());
    layers.insert(std::stoll(k->text.substr(marker.size(), end - marker.size())));
  }
  STRATA_IO_CHECK(layers.empty() || *layers.rbegin() + 1 == static_cast<int64_t>(layers.size()), where,
                  "decoder layers are not numbered 0 … ", layers.size() - 1);
  return static_cast<int64_t>(layers.size());
}

// How a tensor of a tensor-parallel rank is split (Megatron's partition_dim): column-parallel
// linears and the vocabulary along dim 0, row-parallel linears along dim 1, others whole.
int split_dim_of(const std::string& name, bool* fc1) {
  const size_t dot = name.rfind('.');
  const std::string module = name.substr(0, dot);
  std::string leaf = name.substr(dot + 1);
  while (!leaf.empty() && std::isdigit(static_cast<unsigned char>(leaf.back()))) leaf.pop_back();  // expert weight<e>
  *fc1 = false;
  if (leaf != "weight" && leaf != "bias") return -1;
  const bool bias = leaf == "bias";
  if (module == "embedding.word_embeddings" || module == "output_layer") return bias ? -1 : 0;
  static const char* kColumn[] = {".self_attention.linear_qkv", ".self_attention.linear_q_proj", ".linear_q_up_proj",
                                  ".linear_kv_up_proj", ".eh_proj"};
  static const char* kRow[] = {".self_attention.linear_proj", ".mlp.linear_fc2", ".mlp.experts.linear_fc2",
                               ".mlp.shared_experts.linear_fc2"};
  for (const char* c : {".mlp.linear_fc1", ".mlp.experts.linear_fc1", ".mlp.shared_experts.linear_fc1"})
    if (ends_with(module, c)) {
      *fc1 = true;
      return 0;
    }
  for (const char* c : kColumn) if (ends_with(module, c)) return 0;
  for (const char* r : kRow) if (ends_with(module, r)) return bias ? -1 : 1;
  return -1;
}

struct Layout {
  int64_t tp = 1, pp = 1, ep = 1, num_experts = 0;
  bool gated = false, tied = true;
  std::map<std::pair<int64_t, int64_t>, int64_t> layer_offset;  // (pp rank, chunk) → first global layer
};

// A rank file's state-dict tensors as LocalTensors (Strata names, shard specs).
void collect_tensors(RankFile& f, const Layout& lay, const std::set<std::string>& model_names) {
  const std::vector<const PyValue*> chunks = model_chunks(f);
  const std::string marker = "decoder.layers.";
  for (size_t c = 0; c < chunks.size(); ++c)
    for (const auto& [k, v] : chunks[c]->dict) {
      if (!k->is_str() || v->kind != PyValue::Kind::Tensor || k->text.find("_extra_state") != std::string::npos) continue;
      LocalTensor t;
      t.key = k->text;
      std::string key = k->text;
      if (key.rfind(marker, 0) == 0) {  // local layer number → global
        const size_t end = key.find('.', marker.size());
        const int64_t local = std::stoll(key.substr(marker.size(), end - marker.size()));
        key = marker + std::to_string(local + lay.layer_offset.at({f.pp_rank, static_cast<int64_t>(c)})) + key.substr(end);
      }
      const bool expert = key.find("mlp.experts.") != std::string::npos;
      const int64_t expert_offset = expert && lay.ep > 1 ? f.ep_rank * (lay.num_experts / lay.ep) : 0;
      t.name = resolve_megatron_norm_alias(megatron_key_to_strata_name(key, expert_offset), model_names);
      t.shape = v->tensor.size;
      t.ref = v->tensor;
      bool fc1 = false;
      t.shard.dim = split_dim_of(t.name, &fc1);
      if (t.shard.dim >= static_cast<int>(t.shape.size())) t.shard.dim = -1;
      t.shard.parts = t.shard.dim >= 0 ? lay.tp : 1;
      t.shard.rank = t.shard.dim >= 0 ? f.tp_rank : 0;
      t.shard.gated = fc1 && lay.gated;
      t.contributes = (t.shard.dim >= 0 || f.tp_rank == 0) && (expert || f.ep_rank == 0);
      // A tied output layer's copy on the last stage (Megatron keeps it equal to the embedding):
      // in the optimizer's parameters, not in the table.
      if (lay.tied && t.name == "output_layer.weight") t.contributes = false;
      t.is_parameter = t.name.find("router.expert_bias") == std::string::npos &&
                       t.name.find("local_tokens_per_expert") == std::string::npos;
      f.tensors.push_back(std::move(t));
    }
}

// Opens every rank file the saved parallel layout implies and numbers the pipeline stages' layers.
std::vector<RankFile> open_rank_files(const std::string& iteration_dir, const PyValue& args, Layout& lay) {
  lay.tp = int_arg(args, "tensor_model_parallel_size", 1);
  lay.pp = int_arg(args, "pipeline_model_parallel_size", 1);
  lay.ep = int_arg(args, "expert_model_parallel_size", 1);
  lay.num_experts = int_arg(args, "num_moe_experts", 0);
  lay.gated = bool_arg(args, "swiglu") || bool_arg(args, "gated_linear_unit");
  lay.tied = !bool_arg(args, "untie_embeddings_and_output_weights");
  const int64_t etp = int_arg(args, "expert_tensor_parallel_size", lay.tp);
  STRATA_IO_CHECK(lay.num_experts == 0 || etp == lay.tp, iteration_dir, "was saved with expert_tensor_parallel_size ",
                  etp, " != tensor_model_parallel_size ", lay.tp, "; this build reads legacy expert shards only when they "
                  "are split like the other tensors");
  STRATA_IO_CHECK(lay.ep == 1 || (lay.num_experts > 0 && lay.num_experts % lay.ep == 0), iteration_dir,
                  "expert_model_parallel_size ", lay.ep, " does not divide num_moe_experts ", lay.num_experts);
  std::vector<RankFile> files;
  for (int64_t p = 0; p < lay.pp; ++p)
    for (int64_t e = 0; e < lay.ep; ++e)
      for (int64_t t = 0; t < lay.tp; ++t) {
        RankFile f;
        f.path = (fs::path(iteration_dir) / rank_dir_name(t, p, e, lay.pp > 1, lay.ep > 1) / kModelFile).string();
        STRATA_IO_CHECK(fs::exists(f.path), f.path, "is missing: the checkpoint's args say tensor_model_parallel_size ",
                        lay.tp, ", pipeline_model_parallel_size ", lay.pp, ", expert_model_parallel_size ", lay.ep);
        f.tp_rank = t;
        f.pp_rank = p;
        f.ep_rank = e;
        f.pt = std::make_shared<TorchFile>(f.path);
        f.root = f.pt->archive.root;
        files.push_back(std::move(f));
      }
  // Layers: the chunks in pipeline order (chunk v of every stage, then chunk v + 1), each after the
  // layers of those before it (any split: uniform, first/last stage sizes, layouts).
  std::map<int64_t, const RankFile*> stage_file;
  for (const RankFile& f : files) if (f.tp_rank == 0 && f.ep_rank == 0) stage_file[f.pp_rank] = &f;
  const size_t chunks = model_chunks(*stage_file.at(0)).size();
  int64_t next = 0;
  for (size_t v = 0; v < chunks; ++v)
    for (const auto& [p, f] : stage_file) {
      const std::vector<const PyValue*> mc = model_chunks(*f);
      STRATA_IO_CHECK(mc.size() == chunks, f->path, "holds ", mc.size(), " model chunks, the first stage ", chunks);
      lay.layer_offset[{p, static_cast<int64_t>(v)}] = next;
      next += chunk_layer_count(*mc[v], f->path);
    }
  const int64_t num_layers = int_arg(args, "num_layers", next);
  STRATA_IO_CHECK(next == num_layers, iteration_dir, "its rank files hold ", next, " decoder layers, args.num_layers is ",
                  num_layers);
  return files;
}

// The global shapes against the model's parameters (the vocabulary's padding may differ).
void check_shapes(const StoredTensorTable& table, const std::vector<RankFile>& files,
                  const std::map<std::string, Shape>& model_shapes) {
  for (const RankFile& f : files)
    for (const LocalTensor& t : f.tensors) {
      auto it = model_shapes.find(t.name);
      if (!t.contributes || it == model_shapes.end()) continue;
      const std::vector<int64_t> want(it->second.begin(), it->second.end()), got = table.at(t.name).shape;
      const bool vocab = t.name == "embedding.word_embeddings.weight" || t.name == "output_layer.weight";
      const bool same = vocab ? got.size() == want.size() && got.back() == want.back() : got == want;
      STRATA_IO_CHECK(same, f.path, "tensor '", t.key, "' ", TensorBox{{}, t.shape}.str(), " gives '", t.name, "' the ",
                      "global shape ", TensorBox{{}, got}.str(), " (tensor-parallel split ", t.shard.parts, " along dim ",
                      t.shard.dim, "), but this model's is ", TensorBox{{}, want}.str());
    }
}

void read_run_state(const RankFile& first, MegatronCheckpoint& m) {
  const PyValue& root = root_dict(first);
  const PyValue& args = saved_args(root, first.path);
  const PyValue* version = root.find("checkpoint_version");
  STRATA_IO_CHECK(version && version->is_number() && version->as_double() >= 3.0, first.path, "checkpoint_version ",
                  version && version->is_number() ? std::to_string(version->as_double()) : std::string("missing"),
                  ": this build reads Megatron-Core legacy checkpoints (version 3.0 and later)");
  const PyValue* it = root.find("iteration");
  STRATA_IO_CHECK(it && it->is_int(), first.path, "'iteration' is missing or not an integer");
  m.state.iteration = it->integer;
  const PyValue* consumed = args.attr("consumed_train_samples");
  STRATA_IO_CHECK(consumed && consumed->is_int(), first.path, "args.consumed_train_samples is missing");
  m.state.consumed_train_samples = consumed->integer;
  if (const PyValue* seed = args.attr("seed"); seed && seed->is_int()) m.state.seed = static_cast<uint64_t>(seed->integer);
  m.state.lr_schedule = megatron_lr_schedule(root, first.path);
  if (const PyValue* sch = root.find("opt_param_scheduler"); sch && sch->kind == PyValue::Kind::Dict)
    if (const PyValue* n = sch->find("num_steps"); n && n->is_int()) m.state.lr_scheduler_steps = n->integer;
}

}  // namespace

formats::PyRef read_megatron_legacy_common(const std::string& iteration_dir) {
  const std::string path = first_rank_file(iteration_dir);
  TorchFile pt(path);
  STRATA_IO_CHECK(pt.archive.root->kind == PyValue::Kind::Dict, path, "holds a ", pt.archive.root->kind_name(),
                  ", not a dict");
  saved_args(*pt.archive.root, path);
  return pt.archive.root;
}

MegatronCheckpoint read_megatron_legacy(const std::string& iteration_dir, const std::vector<Parameter*>& params) {
  const std::string first_path = first_rank_file(iteration_dir);
  MegatronCheckpoint m;
  std::vector<RankFile> files;
  Layout lay;
  {
    auto first = std::make_shared<TorchFile>(first_path);
    STRATA_IO_CHECK(first->archive.root->kind == PyValue::Kind::Dict, first_path, "holds a ",
                    first->archive.root->kind_name(), ", not a dict");
    m.common = first->archive.root;
    const PyValue& args = saved_args(*m.common, first_path);
    m.args = std::make_shared<PyValue>(args);
    files = open_rank_files(iteration_dir, args, lay);
  }
  read_run_state(files.front(), m);
  std::set<std::string> model_names;
  std::map<std::string, Shape> model_shapes;
  for (const Parameter* p : params) {
    const std::string n = checkpoint_parameter_name(p->name);
    model_names.insert(n);
    model_shapes.emplace(n, parameter_global_shape(*p));
  }
  for (RankFile& f : files) {
    collect_tensors(f, lay, model_names);
    for (const LocalTensor& t : f.tensors)
      if (t.contributes) add_local_tensor(m.table, t.name, t, f.pt, t.ref, f.path + "[" + t.key + "]");
  }
  check_shapes(m.table, files, model_shapes);
  m.has_optimizer = read_legacy_optimizer(files, *m.args, m.table, m.state);
  return m;
}

}  // namespace strata
