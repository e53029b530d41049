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
#include "models/parameter_names.h"
#include "training/checkpointing/checkpoint.h"
#include "training/hf/hf_json_read.h"
#include "training/hf/hf_moe_format.h"
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

// The tokenizer of a config, or null when it cannot be built (e.g. moved BPE files).
std::unique_ptr<data::Tokenizer> try_tokenizer(const StrataConfig& cfg) {
  try {
    return data::build_tokenizer(cfg.data, cfg.model.vocab_size);
  } catch (const std::exception&) {
    return nullptr;
  }
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

}  // namespace

ExportResult export_checkpoint(const std::string& load_dir, const std::string& out_dir,
                               std::optional<int64_t> iteration, bool force) {
  STRATA_CHECK(fs::is_directory(load_dir), "export --format hf: --load ", load_dir, " is not a directory");
  STRATA_CHECK(!out_dir.empty(), "export --format hf: --out DIR is required");
  check_out_dir(out_dir, force);
  if (!iteration) iteration = read_checkpoint_tracker(load_dir);
  STRATA_CHECK(iteration.has_value(), "export --format hf: no checkpoint under ", load_dir, " (", kTrackerFile,
               " is missing)");
  const fs::path manifest_path = fs::path(load_dir) / checkpoint_dir_name(*iteration) / "manifest.json";
  STRATA_CHECK(fs::exists(manifest_path), "export --format hf: ", manifest_path.string(),
               " does not exist (no checkpoint at iteration ", *iteration, ")");
  const json manifest = parse_json(manifest_path, "export --format hf");
  const auto jc = manifest.find("config");  // end() when the manifest is not an object
  STRATA_CHECK(jc != manifest.end() && jc->is_string() && !jc->get<std::string>().empty(), "export --format hf: ",
               manifest_path.string(), " holds no config (a non-empty \"config\" string)");
  const std::string yaml = jc->get<std::string>();

  StrataConfig cfg = StrataConfig::from_yaml_text(yaml, {}, manifest_path.string() + " (config)");
  STRATA_CHECK(!cfg.model.hybrid_layer_pattern && !cfg.model.hybrid_override_pattern,
               "export --format hf: the checkpoint is a hybrid model (model.hybrid_layer_pattern), which has no "
               "Hugging Face family in Strata yet");
  STRATA_CHECK(!cfg.model.enable_hyper_connections,
               "export --format hf: the checkpoint uses mHC hyper-connections (model.enable_hyper_connections), "
               "which no Hugging Face format represents");
  cfg.parallel = ParallelConfig{};  // the saving layout (any tp/pp/dp); export runs in one process
  std::unique_ptr<data::Tokenizer> tok = try_tokenizer(cfg);
  if (!cfg.model.vocab_size) {
    STRATA_CHECK(tok != nullptr, "export --format hf: the checkpoint config has no model.vocab_size and its "
                 "tokenizer cannot be built");
    cfg.model.vocab_size = tok->vocab_size();
  }
  cfg.validate(1);
  const Family family = family_for(cfg.resolved_model());  // before allocating anything

  ExportResult r;
  r.family = family;
  r.iteration = *iteration;
  r.dtype = model_dtype(cfg.training.precision);
  if (is_moe(family)) r.notes = detail::moe_export_notes(cfg.resolved_model());
  std::unique_ptr<LanguageModel> model_ptr = make_model(cfg, Device::cpu());
  LanguageModel& model = *model_ptr;
  std::unique_ptr<TensorFileIO> io = make_default_tensor_file_io();
  CheckpointLoadOptions lo;
  lo.load_optimizer = false;
  lo.load_rng = false;
  lo.vocab_padding_may_differ = true;  // a checkpoint saved under tp > 1 pads the vocabulary more
  load_checkpoint(load_dir, model.parameters(), nullptr, *io, lo, *iteration);
  std::map<std::string, Tensor> mg;
  const CanonicalParameterNameMap names({&model}, 0, 1);
  size_t mtp_skipped = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    // The MTP heads are training-only (generation ignores them) and these HF families have no
    // tensors for them: left out, with a note.
    if (names.names()[i].rfind("mtp.", 0) == 0) {
      ++mtp_skipped;
      continue;
    }
    mg[names.names()[i]] = names.parameters()[i]->value;
  }
  if (mtp_skipped > 0)
    r.notes.push_back("the " + std::to_string(mtp_skipped) + " multi-token-prediction parameters (mtp.layers.*, "
                      "model.mtp_num_layers " + std::to_string(cfg.model.mtp_depths()) +
                      ") are training-only and not exported");
  const std::map<std::string, Tensor> tensors = to_hf_tensors(cfg.resolved_model(), family, mg);

  ExportInfo info;
  info.dtype = r.dtype;
  info.tokenizer_type = config::enum_to_string<TokenizerType>(kTokenizerTypeNames, cfg.data.tokenizer_type);
  if (tok) {
    info.eos_id = tok->eod();
    info.bos_id = tok->bos().value_or(tok->eod());
  }

  const fs::path out(out_dir);
  fs::create_directories(out);
  formats::write_safetensors((out / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_text(out / "config.json", config_json(cfg.resolved_model(), family, info).dump(2) + "\n");
  write_text(out / "generation_config.json", generation_config_json(cfg.inference, info).dump(2) + "\n");
  r.files = {"model.safetensors", "config.json", "generation_config.json"};
  if (cfg.data.tokenizer_type == TokenizerType::GPT2BPETokenizer && cfg.data.vocab_file && cfg.data.merge_file &&
      fs::exists(*cfg.data.vocab_file) && fs::exists(*cfg.data.merge_file)) {
    fs::copy_file(*cfg.data.vocab_file, out / "vocab.json", fs::copy_options::overwrite_existing);
    fs::copy_file(*cfg.data.merge_file, out / "merges.txt", fs::copy_options::overwrite_existing);
    r.files.push_back("vocab.json");
    r.files.push_back("merges.txt");
  }
  // The tokenizer files, so that transformers loads the model and its tokenizer from one directory.
  if (cfg.data.tokenizer_type == TokenizerType::HuggingFaceTokenizer && cfg.data.tokenizer_model && tok) {
    for (const std::string& f : data::HuggingFaceTokenizer::files_of(*cfg.data.tokenizer_model)) {
      fs::copy_file(f, out / fs::path(f).filename(), fs::copy_options::overwrite_existing);
      r.files.push_back(fs::path(f).filename().string());
    }
  } else if (tokenizer_uses_model_file(cfg.data.tokenizer_type) && cfg.data.tokenizer_model && tok) {
    fs::copy_file(*cfg.data.tokenizer_model, out / "tokenizer.model", fs::copy_options::overwrite_existing);
    r.files.push_back("tokenizer.model");
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
  for (const auto& [name, t] : hf_tensors) all_bf16 = all_bf16 && t.dtype() == DType::BF16;

  ImportResult r;
  r.family = ic.family;
  StrataConfig& cfg = r.config;
  cfg.model = ic.model;
  cfg.training.precision = all_bf16 ? Precision::Bf16 : Precision::Fp32;
  cfg.data.mock_data = true;  // an imported model has no dataset; a training config names its own
  cfg.optimizer.lr = 1.0e-5;  // required by validate(); a fine-tuning rate, override it for training
  const fs::path save(save_dir);
  if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
    fs::create_directories(save);
    fs::copy_file(dir / "vocab.json", save / "vocab.json", fs::copy_options::overwrite_existing);
    fs::copy_file(dir / "merges.txt", save / "merges.txt", fs::copy_options::overwrite_existing);
    cfg.data.tokenizer_type = TokenizerType::GPT2BPETokenizer;
    cfg.data.vocab_file = fs::absolute(save / "vocab.json").string();
    cfg.data.merge_file = fs::absolute(save / "merges.txt").string();
  } else if (fs::exists(dir / "tokenizer.json")) {  // the directory's own tokenizer, kept with the checkpoint
    const fs::path kept = save / "tokenizer";
    fs::create_directories(kept);
    for (const std::string& f : data::HuggingFaceTokenizer::files_of(dir.string()))
      fs::copy_file(f, kept / fs::path(f).filename(), fs::copy_options::overwrite_existing);
    cfg.data.tokenizer_type = TokenizerType::HuggingFaceTokenizer;
    cfg.data.tokenizer_model = fs::absolute(kept).string();
  } else if (fs::exists(dir / "tokenizer.model")) {  // a SentencePiece model only (transformers' slow tokenizer)
    fs::create_directories(save);
    fs::copy_file(dir / "tokenizer.model", save / "tokenizer.model", fs::copy_options::overwrite_existing);
    cfg.data.tokenizer_type = TokenizerType::Llama2Tokenizer;
    cfg.data.tokenizer_model = fs::absolute(save / "tokenizer.model").string();
  } else if (ic.tokenizer_type && *ic.tokenizer_type != "GPT2BPETokenizer") {
    cfg.apply_override("data.tokenizer_type=" + *ic.tokenizer_type);
  } else {
    cfg.data.tokenizer_type = TokenizerType::NullTokenizer;
  }
  for (const std::string& o : overrides) cfg.apply_override(o);
  cfg.validate(1);
  data::build_checked_tokenizer(cfg.data, cfg.model.vocab_size);  // a bad tokenizer file fails before the model

  const int64_t padded = cfg.model.padded_vocab(1);
  // Names and shapes are checked here, before the model is allocated.
  const std::map<std::string, Tensor> mg =
      from_hf_tensors(cfg.resolved_model(), ic.family, ic.file_vocab, padded, hf_tensors, file);

  std::unique_ptr<LanguageModel> model_ptr = make_model(cfg, Device::cpu());
  LanguageModel& model = *model_ptr;
  const CanonicalParameterNameMap names({&model}, 0, 1);
  for (Parameter* p : names.parameters()) {
    const std::string& name = names.name_of(p);
    auto it = mg.find(name);
    STRATA_CHECK(it != mg.end(), "import --hf: no tensor in ", file, " maps to parameter '", name, "'");
    STRATA_CHECK(it->second.shape() == p->value.shape(), "import --hf: ", file, " gives parameter '", name,
                 "' shape ", it->second.shape().str(), ", the model expects ", p->value.shape().str());
    p->value.copy_(it->second);
  }
  CheckpointState st;
  st.iteration = 0;
  st.seed = static_cast<uint64_t>(cfg.training.seed);
  st.config_yaml = cfg.to_yaml();
  std::unique_ptr<TensorFileIO> io = make_default_tensor_file_io();
  r.checkpoint_dir = save_checkpoint(save_dir, st, model.parameters(), nullptr, *io);
  return r;
}

}  // namespace strata::hf
