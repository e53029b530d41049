// Strata checkpoint ⇄ Hugging Face directory (training/hf/hf_export.h).
// Reference: transformers modeling_utils.py (save_pretrained: model.safetensors with metadata
// {"format": "pt"}, model.safetensors.index.json "weight_map" for shards), Megatron-LM
// tools/checkpoint/convert.py.
#include "training/hf/hf_export.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/formats/safetensors.h"
#include "data/tokenizer.h"
#include "data/tokenizer_hf.h"
#include "models/layers/moe/router.h"
#include "models/layers/moe/router_ref.h"
#include "models/parameter_names.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_tokenizer.h"
#include "training/checkpointing/contained_path.h"
#include "training/hf/hf_deepseek_format.h"
#include "training/hf/hf_deepseek_map.h"
#include "training/hf/hf_json_read.h"
#include "training/hf/hf_gpt_oss_format.h"
#include "training/hf/hf_moe_format.h"
#include "training/hf/hf_nemotron_h_format.h"
#include "training/config/model_factory.h"
#include "training/checkpointing/tensor_file.h"

namespace strata::hf {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string read_text(const fs::path& p, const char* what) {
  std::ifstream in(p, std::ios::binary);
  STRATA_CHECK(in.good(), what, ": cannot read ", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json(const fs::path& p, const char* what) {
  try {
    return json::parse(read_text(p, what));
  } catch (const json::exception& e) {
    STRATA_THROW(what, ": ", p.string(), " is not valid JSON: ", e.what());
  }
}

void write_text(const fs::path& p, const std::string& text) {
  const fs::path tmp = p.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    STRATA_CHECK(out.good(), "export --format hf: cannot write ", tmp.string());
    out << text;
    out.close();
    STRATA_CHECK(!out.fail(), "export --format hf: error writing ", tmp.string());
  }
  fs::rename(tmp, p);
}

// Every tensor of model.safetensors, or of the shards model.safetensors.index.json lists.
std::map<std::string, Tensor> read_hf_tensors(const fs::path& dir, std::string& file) {
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) {
    file = single.string();
    return formats::read_safetensors(file).tensors;
  }
  if (fs::exists(index)) {
    file = index.string();
    const json j = parse_json(index, "import --hf");
    STRATA_CHECK(j.contains("weight_map") && j.at("weight_map").is_object(), file, ": no \"weight_map\" object");
    std::set<std::string> shards;
    for (auto it = j.at("weight_map").begin(); it != j.at("weight_map").end(); ++it) {
      STRATA_CHECK(it.value().is_string(), file, ": weight_map entry '", it.key(), "' is not a file name");
      // A shard must lie inside the directory: a crafted index cannot make import read other files.
      contained_path(dir, it.value().get<std::string>(), file, "weight_map entry '" + it.key() + "'");
      shards.insert(it.value().get<std::string>());
    }
    std::map<std::string, Tensor> all;
    for (const std::string& s : shards) {
      const std::string path = (dir / s).string();
      STRATA_CHECK(fs::exists(path), file, " lists shard ", s, ", which is missing");
      for (auto& [name, t] : formats::read_safetensors(path).tensors) {
        STRATA_CHECK(!all.count(name), path, ": tensor '", name, "' also appears in another shard");
        all[name] = t;
      }
    }
    return all;
  }
  STRATA_CHECK(!fs::exists(dir / "pytorch_model.bin"), "import --hf: ", dir.string(),
               " holds pytorch_model.bin only; strata reads safetensors (convert it with "
               "transformers' save_pretrained(safe_serialization=True))");
  STRATA_THROW("import --hf: ", dir.string(), " has no model.safetensors or model.safetensors.index.json");
}

// An import writes iteration 0 and the tracker: refuse a directory that holds a run already, whose
// tracker it would rewrite (resuming that run would then fail).
void check_save_dir_free(const fs::path& save) {
  std::error_code ec;
  if (!fs::exists(save, ec)) return;
  STRATA_CHECK(fs::is_directory(save, ec), "import --hf: --save ", save.string(), " exists and is not a directory");
  std::string found = fs::exists(save / kTrackerFile, ec) ? kTrackerFile : "";
  for (const auto& e : fs::directory_iterator(save, ec)) {
    if (!found.empty()) break;
    if (e.is_directory() && e.path().filename().string().rfind("iter_", 0) == 0) found = e.path().filename().string();
  }
  STRATA_CHECK(found.empty(), "import --hf: --save ", save.string(), " already holds a checkpoint (", found,
               "); choose another directory, or pass --force to write iteration 0 there and point its tracker at it");
}

// An export writes its files into `out`: unless `force`, refuse a directory that holds files
// already, which would mix with the export's (a sharded model.safetensors.index.json next to the
// new model.safetensors). A path that is not a directory is refused either way.
void check_out_dir(const fs::path& out, bool force) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  STRATA_CHECK(fs::is_directory(out, ec), "export --format hf: --out ", out.string(), " exists and is not a directory");
  if (force) return;
  fs::directory_iterator it(out, ec);
  if (ec || it == fs::directory_iterator()) return;  // empty (an unreadable one fails at the first write)
  STRATA_THROW("export --format hf: --out ", out.string(), " is not empty (it holds ",
               it->path().filename().string(), "); choose another directory, or pass --force to write the "
               "export's files there (files of the same name are replaced, the others are left)");
}

// The tokenizer of an HF directory, named by its files there: vocab.json + merges.txt →
// GPT2BPETokenizer; tokenizer.json (+ tokenizer_config.json) → HuggingFaceTokenizer; tokenizer.model
// alone (transformers' slow tokenizer) → Llama2Tokenizer; tiktoken.json of a Strata export that
// recorded TikTokenizer → TikTokenizer with the recorded settings; else the type a Strata export recorded,
// else NullTokenizer. The checkpoint's save copies the files into its iteration
// (checkpoint_tokenizer.h), so nothing is written here and errors name the directory's files.
void use_directory_tokenizer(const fs::path& dir, const ImportedConfig& ic, StrataConfig& cfg) {
  DataConfig& d = cfg.data;
  if (ic.tokenizer_type == "TikTokenizer" && fs::exists(dir / "tiktoken.json")) {
    d.tokenizer_type = TokenizerType::TikTokenizer;
    d.tokenizer_model = fs::absolute(dir / "tiktoken.json").string();
    const json& t = ic.tokenizer_settings;
    if (t.is_object()) {  // the data.tiktoken_* fields the export recorded, as overrides (checked as any)
      for (const char* key : {"tiktoken_pattern", "tiktoken_num_special_tokens"})
        if (t.contains(key)) cfg.apply_override(std::string("data.") + key + "=" + t.at(key).dump());
      if (t.contains("tokenizer_special_tokens") && t.at("tokenizer_special_tokens").is_array())
        d.tokenizer_special_tokens = t.at("tokenizer_special_tokens").get<std::vector<std::string>>();
    }
  } else if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
    d.tokenizer_type = TokenizerType::GPT2BPETokenizer;
    d.vocab_file = fs::absolute(dir / "vocab.json").string();
    d.merge_file = fs::absolute(dir / "merges.txt").string();
  } else if (fs::exists(dir / "tokenizer.json")) {
    d.tokenizer_type = TokenizerType::HuggingFaceTokenizer;
    d.tokenizer_model = fs::absolute(dir).string();
  } else if (fs::exists(dir / "tokenizer.model")) {
    d.tokenizer_type = TokenizerType::Llama2Tokenizer;
    d.tokenizer_model = fs::absolute(dir / "tokenizer.model").string();
  } else if (ic.tokenizer_type && *ic.tokenizer_type != "GPT2BPETokenizer") {
    cfg.apply_override("data.tokenizer_type=" + *ic.tokenizer_type);
  } else {
    d.tokenizer_type = TokenizerType::NullTokenizer;
  }
}

// Every checkpointed tensor of a one-process model under its canonical name: the parameters
// (CanonicalParameterNameMap) and the MoE routers' expert biases (buffers, named as they are).
// The values share storage with the model's.
std::vector<std::pair<std::string, Tensor>> canonical_tensors(LanguageModel& model) {
  std::vector<std::pair<std::string, Tensor>> out;
  const CanonicalParameterNameMap names({&model}, 0, 1);
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names.names()[i], names.parameters()[i]->value);
  std::vector<Parameter*> buffers;
  for (const MoeRouterRef& r : model.moe_routers()) r.router->collect_buffers(buffers);
  for (Parameter* b : buffers) out.emplace_back(b->name, b->value);
  return out;
}

// Tensors kept in f32 in a bf16 model, which do not make a bf16 file an f32 one: what transformers
// keeps in f32 (DeepseekV3PreTrainedModel and NemotronHPreTrainedModel._keep_in_fp32_modules_strict:
// the router's gate and e_score_correction_bias) and NemotronH's A_log and D (f32 in Megatron and
// Strata, written so by the export).
bool kept_in_f32(Family f, const std::string& name) {
  auto ends = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (is_hybrid(f))
    return ends(".mixer.gate.weight") || ends(".mixer.gate.e_score_correction_bias") || ends(".mixer.A_log") ||
           ends(".mixer.D");
  return is_mla(f) && (ends(".mlp.gate.weight") || ends(".mlp.gate.e_score_correction_bias"));
}

// DeepseekV3: model.mtp_num_layers (config.json's num_nextn_predict_layers) as far as the file holds
// the MTP layers; transformers' save_pretrained writes none (its model has no MTP layers), so a
// file without them imports without MTP, with a note.
void use_present_mtp_layers(const ImportedConfig& ic, const std::map<std::string, Tensor>& hf, ModelConfig& m,
                            std::vector<std::string>& notes) {
  const int64_t present = detail::deepseek_mtp_layers_in(hf, m.num_layers, ic.file_mtp_layers);
  if (present > 0 && !m.num_experts) {  // Strata's MTP layer of a dense model is dense, DeepSeek's is MoE
    m.mtp_num_layers = std::nullopt;
    notes.push_back("the " + std::to_string(present) + " MTP layer(s) of a dense model (first_k_dense_replace >= "
                    "num_hidden_layers) are left out: Strata's MTP layers take the decoder's last (dense) layer kind");
    return;
  }
  m.mtp_num_layers = present > 0 ? std::optional<int64_t>(present) : std::nullopt;
  if (present < ic.file_mtp_layers)
    notes.push_back("config.json's num_nextn_predict_layers is " + std::to_string(ic.file_mtp_layers) +
                    " but the file holds " + std::to_string(present) + " MTP layer(s) (model.layers." +
                    std::to_string(m.num_layers + present) + ".eh_proj.weight is missing): model.mtp_num_layers " +
                    (present > 0 ? std::to_string(present) : std::string("null")));
}

// The iteration to export: `iteration` (refused when negative; a missing one names the iterations
// that exist) or the tracker's.
int64_t export_iteration(const std::string& load_dir, std::optional<int64_t> iteration) {
  if (!iteration) {
    iteration = read_checkpoint_tracker(load_dir);
    STRATA_CHECK(iteration.has_value(), "export --format hf: no checkpoint under ", load_dir, " (", kTrackerFile,
                 " is missing)");
    return *iteration;
  }
  STRATA_CHECK(*iteration >= 0, "export --format hf: --iteration must be >= 0, got ", *iteration);
  if (fs::is_directory(fs::path(load_dir) / checkpoint_dir_name(*iteration))) return *iteration;
  std::set<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(load_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("iter_", 0) == 0 && fs::exists(e.path() / "manifest.json")) found.insert(n);
  }
  std::string have;
  for (const std::string& n : found) have += (have.empty() ? "" : ", ") + n;
  STRATA_THROW("export --format hf: no checkpoint at iteration ", *iteration, " under ", load_dir, " (",
               checkpoint_dir_name(*iteration), " is missing; ", have.empty() ? "it holds no iter_* checkpoint" :
               "it holds " + have, ")");
}

// The export goes to a staging directory beside `out` first (so that a failure leaves `out` as it
// was), then into place: renamed to `out` when that is absent or empty, else (--force) file by file.
fs::path staging_dir(const fs::path& out) {
  fs::path o = out.lexically_normal();
  if (o.filename().empty()) o = o.parent_path();
  return o.parent_path() / ("." + o.filename().string() + ".export.tmp");
}
void publish(const fs::path& staging, const fs::path& out) {
  std::error_code ec;
  if (fs::is_directory(out, ec) && fs::is_empty(out, ec)) fs::remove(out, ec);
  if (!fs::exists(out, ec)) {
    fs::rename(staging, out);
    return;
  }
  for (const auto& e : fs::directory_iterator(staging)) fs::rename(e.path(), out / e.path().filename());
  fs::remove(staging);
}

// The tokenizer files beside the weights, so that transformers loads the model and its tokenizer
// from one directory (and strata import takes it back). Returns their names in `dir`.
std::vector<std::string> copy_tokenizer_files(const DataConfig& d, const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> files;  // (source, name in dir)
  if (d.tokenizer_type == TokenizerType::GPT2BPETokenizer) {
    files = {{*d.vocab_file, "vocab.json"}, {*d.merge_file, "merges.txt"}};
  } else if (d.tokenizer_type == TokenizerType::HuggingFaceTokenizer) {
    for (const std::string& f : data::HuggingFaceTokenizer::files_of(*d.tokenizer_model))
      files.emplace_back(f, fs::path(f).filename().string());
    files.front().second = "tokenizer.json";
  } else if (d.tokenizer_type == TokenizerType::TikTokenizer) {
    files = {{*d.tokenizer_model, "tiktoken.json"}};  // Megatron's vocabulary JSON (no transformers loader)
  } else if (tokenizer_uses_model_file(d.tokenizer_type)) {
    files = {{*d.tokenizer_model, "tokenizer.model"}};
  }
  std::vector<std::string> names;
  for (const auto& [source, name] : files) {
    fs::copy_file(source, dir / name, fs::copy_options::overwrite_existing);
    names.push_back(name);
  }
  return names;
}

// The checkpoint's config from its manifest, its tokenizer fields pointing at the copies the
// checkpoint carries (checkpoint_tokenizer.h), the layout of one process.
StrataConfig checkpoint_config(const fs::path& manifest_path) {
  const json manifest = parse_json(manifest_path, "export --format hf");
  const auto jc = manifest.find("config");  // end() when the manifest is not an object
  STRATA_CHECK(jc != manifest.end() && jc->is_string() && !jc->get<std::string>().empty(), "export --format hf: ",
               manifest_path.string(), " holds no config (a non-empty \"config\" string)");
  StrataConfig cfg = StrataConfig::from_yaml_text(jc->get<std::string>(), {}, manifest_path.string() + " (config)");
  use_checkpoint_tokenizer(manifest, manifest_path, cfg.data);
  cfg.parallel = ParallelConfig{};  // the saving layout (any tp/pp/dp); export runs in one process
  return cfg;
}

// The checkpoint's tokenizer; an export without it could not be imported back, so a missing or
// broken file is an error naming it.
std::unique_ptr<data::Tokenizer> export_tokenizer(const StrataConfig& cfg, const fs::path& manifest_path) {
  try {
    return data::build_checked_tokenizer(cfg.data, cfg.model.vocab_size);
  } catch (const std::exception& e) {
    STRATA_THROW("export --format hf: the tokenizer of ", manifest_path.string(), " (data.tokenizer_type ",
                 config::enum_to_string<TokenizerType>(kTokenizerTypeNames, cfg.data.tokenizer_type),
                 ") cannot be loaded, and an export without it could not be imported back: ", e.what());
  }
}

}  // namespace

ExportResult export_checkpoint(const std::string& load_dir, const std::string& out_dir,
                               std::optional<int64_t> iteration, bool force) {
  STRATA_CHECK(fs::is_directory(load_dir), "export --format hf: --load ", load_dir, " is not a directory");
  STRATA_CHECK(!out_dir.empty(), "export --format hf: --out DIR is required");
  check_out_dir(out_dir, force);
  ExportResult r;
  r.iteration = export_iteration(load_dir, iteration);
  const fs::path manifest_path = fs::path(load_dir) / checkpoint_dir_name(r.iteration) / "manifest.json";
  STRATA_CHECK(fs::exists(manifest_path), "export --format hf: ", manifest_path.string(),
               " does not exist (no checkpoint at iteration ", r.iteration, ")");
  StrataConfig raw = checkpoint_config(manifest_path);
  STRATA_CHECK(!raw.model.enable_hyper_connections,
               "export --format hf: the checkpoint uses mHC hyper-connections (model.enable_hyper_connections), "
               "which no Hugging Face format represents");
  const std::unique_ptr<data::Tokenizer> tok = export_tokenizer(raw, manifest_path);
  if (!raw.model.vocab_size) raw.model.vocab_size = tok->vocab_size();
  const ResolvedConfig cfg = raw.validate(1);
  r.family = family_for(cfg.model);  // before allocating anything
  r.dtype = model_dtype(cfg.training->precision);
  if (is_moe(r.family)) r.notes = detail::moe_export_notes(cfg.model);
  if (is_mla(r.family)) r.notes = detail::deepseek_export_notes(cfg.model);
  if (is_hybrid(r.family)) r.notes = detail::nemotron_h_export_notes(cfg.model);
  if (r.family == Family::GptOss) r.notes = detail::gpt_oss_export_notes(cfg.model);
  // DeepseekV3 writes the MTP layers as DeepSeek stores them; the other families have none.
  const bool export_mtp = is_mla(r.family) && detail::deepseek_export_mtp_layers(cfg.model) > 0;
  std::unique_ptr<LanguageModel> model_ptr = make_model(cfg, Device::cpu());
  LanguageModel& model = *model_ptr;
  std::unique_ptr<TensorFileIO> io = make_default_tensor_file_io();
  CheckpointLoadOptions lo;
  lo.load_optimizer = false;
  lo.load_rng = false;
  lo.vocab_padding_may_differ = true;  // a checkpoint saved under tp > 1 pads the vocabulary more
  // The parameters and the routers' expert biases (buffers checkpointed with them).
  load_checkpoint(load_dir, checkpoint_tensors({&model}), nullptr, *io, lo, r.iteration);
  std::map<std::string, Tensor> mg;
  size_t mtp_skipped = 0;
  for (const auto& [name, value] : canonical_tensors(model)) {
    // The MTP heads are training-only (generation ignores them) and the HF families other than
    // DeepseekV3 have no tensors for them: left out, with a note.
    if (name.rfind("mtp.", 0) == 0 && !export_mtp) {
      ++mtp_skipped;
      continue;
    }
    mg[name] = value;
  }
  if (mtp_skipped > 0 && !is_mla(r.family) && !is_hybrid(r.family) && r.family != Family::GptOss)  // their notes say why
    r.notes.push_back("the " + std::to_string(mtp_skipped) + " multi-token-prediction parameters (mtp.layers.*, "
                      "model.mtp_num_layers " + std::to_string(cfg.model->mtp_depths()) +
                      ") are training-only and not exported");
  const std::map<std::string, Tensor> tensors = to_hf_tensors(cfg.model, r.family, mg);

  ExportInfo info;
  info.dtype = r.dtype;
  info.tokenizer_type = config::enum_to_string<TokenizerType>(kTokenizerTypeNames, cfg.data->tokenizer_type);
  info.eos_id = tok->eod();
  info.bos_id = tok->bos().value_or(tok->eod());
  if (cfg.data->tokenizer_type == TokenizerType::TikTokenizer)
    info.tokenizer_settings = {
        {"tiktoken_pattern", config::enum_to_string<TiktokenPattern>(kTiktokenPatternNames, cfg.data->tiktoken_pattern)},
        {"tiktoken_num_special_tokens", cfg.data->tiktoken_num_special_tokens},
        {"tokenizer_special_tokens", cfg.data->tokenizer_special_tokens}};

  const fs::path out(out_dir), staging = staging_dir(out);
  fs::remove_all(staging);  // a crashed export's
  fs::create_directories(staging);
  try {
    formats::write_safetensors((staging / "model.safetensors").string(), tensors, {{"format", "pt"}});
    write_text(staging / "config.json", config_json(cfg.model, r.family, info).dump(2) + "\n");
    write_text(staging / "generation_config.json", generation_config_json(cfg.inference, info).dump(2) + "\n");
    r.files = {"model.safetensors", "config.json", "generation_config.json"};
    for (const std::string& f : copy_tokenizer_files(cfg.data, staging)) r.files.push_back(f);
    publish(staging, out);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    throw;
  }
  return r;
}

ImportResult import_checkpoint(const std::string& hf_dir, const std::string& save_dir,
                               const std::vector<std::string>& overrides, bool force) {
  STRATA_CHECK(fs::is_directory(hf_dir), "import --hf: ", hf_dir, " is not a directory");
  STRATA_CHECK(!save_dir.empty(), "import --hf: --save DIR is required");
  if (!force) check_save_dir_free(save_dir);
  const fs::path dir(hf_dir);
  const fs::path config_path = dir / "config.json";
  STRATA_CHECK(fs::exists(config_path), "import --hf: ", config_path.string(), " is missing");
  const ImportedConfig ic = model_config_from_json(
      detail::parse_config_json(read_text(config_path, "import --hf"), config_path.string()), config_path.string());

  std::string file;
  const std::map<std::string, Tensor> hf_tensors = read_hf_tensors(dir, file);
  bool all_bf16 = !hf_tensors.empty();
  for (const auto& [name, t] : hf_tensors)
    all_bf16 = all_bf16 && (t.dtype() == DType::BF16 || kept_in_f32(ic.family, name));

  StrataConfig raw;
  raw.model = ic.model;
  std::vector<std::string> notes;
  if (is_mla(ic.family)) use_present_mtp_layers(ic, hf_tensors, raw.model, notes);
  raw.training.precision = all_bf16 ? Precision::Bf16 : Precision::Fp32;
  raw.data.mock_data = true;  // an imported model has no dataset; a training config names its own
  raw.optimizer.lr = 1.0e-5;  // required by validate(); a fine-tuning rate, override it for training
  use_directory_tokenizer(dir, ic, raw);
  for (const std::string& o : overrides) raw.apply_override(o);
  ImportResult r{ic.family, raw.validate(1), "", {}};
  const ResolvedConfig& cfg = r.config;
  data::build_checked_tokenizer(cfg.data, cfg.model->vocab_size);  // a bad tokenizer file fails before the model,
                                                                   // naming the source file

  const int64_t padded = cfg.model->padded_vocab(1);
  // Names and shapes are checked here, before the model is allocated.
  const std::map<std::string, Tensor> mg =
      from_hf_tensors(cfg.model, ic.family, ic.file_vocab, padded, hf_tensors, file, ic.file_mtp_layers, &notes);

  std::unique_ptr<LanguageModel> model_ptr = make_model(cfg, Device::cpu());
  LanguageModel& model = *model_ptr;
  for (auto& [name, value] : canonical_tensors(model)) {
    auto it = mg.find(name);
    STRATA_CHECK(it != mg.end(), "import --hf: no tensor in ", file, " maps to parameter '", name, "'");
    STRATA_CHECK(it->second.shape() == value.shape(), "import --hf: ", file, " gives parameter '", name,
                 "' shape ", it->second.shape().str(), ", the model expects ", value.shape().str());
    value.copy_(it->second);
  }
  CheckpointState st;
  st.iteration = 0;
  st.seed = static_cast<uint64_t>(cfg.training->seed);
  st.config_yaml = cfg.to_yaml();
  std::unique_ptr<TensorFileIO> io = make_default_tensor_file_io();
  // The save copies the tokenizer files into the iteration (checkpoint_tokenizer.h); a failure
  // there leaves no trace: not the --save directory when the import made it, else no iter_0000000.tmp.
  std::error_code ec;
  const bool save_existed = fs::exists(save_dir, ec);
  try {
    r.checkpoint_dir = save_checkpoint(save_dir, st, checkpoint_tensors({&model}), nullptr, *io);
  } catch (...) {
    fs::remove_all(save_existed ? fs::path(save_dir) / (checkpoint_dir_name(0) + ".tmp") : fs::path(save_dir), ec);
    throw;
  }
  r.notes = std::move(notes);
  return r;
}

}  // namespace strata::hf
