// The tokenizer files a checkpoint carries (checkpoint_tokenizer.h).
#include "training/checkpointing/checkpoint_tokenizer.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "core/error.h"
#include "data/tokenizer_hf.h"
#include "training/checkpointing/checksum.h"
#include "training/checkpointing/contained_path.h"
#include "training/config/config.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kDir = "tokenizer";

// A config field's files: (source path, name of the copy); the first is the one the field names.
struct FieldFiles {
  const char* field;
  std::vector<std::pair<std::string, std::string>> files;
};

std::vector<FieldFiles> tokenizer_files(const DataConfig& d) {
  std::vector<FieldFiles> out;
  auto check = [](const char* field, const std::string& path) {
    STRATA_CHECK(fs::exists(path), "checkpoint: data.", field, " names ", path, ", which does not exist (a checkpoint "
                 "carries a copy of its tokenizer files)");
  };
  if (d.tokenizer_type == TokenizerType::GPT2BPETokenizer) {
    if (d.vocab_file) {
      check("vocab_file", *d.vocab_file);
      out.push_back({"vocab_file", {{*d.vocab_file, "vocab.json"}}});
    }
    if (d.merge_file) {
      check("merge_file", *d.merge_file);
      out.push_back({"merge_file", {{*d.merge_file, "merges.txt"}}});
    }
  } else if (d.tokenizer_type == TokenizerType::HuggingFaceTokenizer && d.tokenizer_model) {
    check("tokenizer_model", *d.tokenizer_model);
    FieldFiles f{"tokenizer_model", {}};
    const std::vector<std::string> files = data::HuggingFaceTokenizer::files_of(*d.tokenizer_model);
    for (size_t i = 0; i < files.size(); ++i)
      f.files.emplace_back(files[i], i == 0 ? "tokenizer.json" : fs::path(files[i]).filename().string());
    out.push_back(f);
  } else if (d.tokenizer_type == TokenizerType::TikTokenizer && d.tokenizer_model) {
    check("tokenizer_model", *d.tokenizer_model);  // a .json name, which Megatron's reload_mergeable_ranks asserts
    out.push_back({"tokenizer_model", {{*d.tokenizer_model, "tiktoken.json"}}});
  } else if (tokenizer_uses_model_file(d.tokenizer_type) && d.tokenizer_model) {
    check("tokenizer_model", *d.tokenizer_model);
    out.push_back({"tokenizer_model", {{*d.tokenizer_model, "tokenizer.model"}}});
  }
  return out;
}

}  // namespace

json save_checkpoint_tokenizer(const std::string& config_yaml, const fs::path& iter_dir) {
  if (config_yaml.empty()) return nullptr;
  StrataConfig cfg = StrataConfig::from_yaml_text(config_yaml, {}, "checkpoint config");
  json member = {{"type", config::enum_to_string<TokenizerType>(kTokenizerTypeNames, cfg.data.tokenizer_type)},
                 {"fields", json::object()},
                 {"files", json::object()}};
  const std::vector<FieldFiles> fields = tokenizer_files(cfg.data);
  if (!fields.empty()) fs::create_directories(iter_dir / kDir);
  for (const FieldFiles& f : fields) {
    for (const auto& [source, name] : f.files) {
      const std::string rel = std::string(kDir) + "/" + name;
      fs::copy_file(source, iter_dir / rel, fs::copy_options::overwrite_existing);
      uint64_t bytes = 0;
      const uint32_t crc = crc32c_file((iter_dir / rel).string(), &bytes);
      member["files"][rel] = {{"crc32c", crc32c_hex(crc)}, {"bytes", bytes}, {"source", fs::absolute(source).string()}};
    }
    member["fields"][f.field] = std::string(kDir) + "/" + f.files.front().second;
  }
  return member;
}

void use_checkpoint_tokenizer(const json& manifest, const fs::path& manifest_path, DataConfig& data) {
  if (!manifest.is_object() || !manifest.contains("tokenizer")) return;
  const std::string where = manifest_path.string();
  const json& t = manifest.at("tokenizer");
  STRATA_CHECK(t.is_object() && t.contains("files") && t.at("files").is_object() && t.contains("fields") &&
                   t.at("fields").is_object(),
               "checkpoint: ", where, ": \"tokenizer\" is not an object with \"files\" and \"fields\"");
  const fs::path dir = manifest_path.parent_path();
  for (auto it = t.at("files").begin(); it != t.at("files").end(); ++it) {
    const fs::path p = contained_path(dir, it.key(), where, "a \"tokenizer\" file");
    const json& e = it.value();
    STRATA_CHECK(e.is_object() && e.contains("crc32c") && e.at("crc32c").is_string() && e.contains("bytes") &&
                     e.at("bytes").is_number_unsigned(),
                 "checkpoint: ", where, ": tokenizer.files.", it.key(), " has no \"crc32c\" and \"bytes\"");
    STRATA_CHECK(fs::is_regular_file(p), "checkpoint: ", p.string(), ", the checkpoint's copy of its tokenizer file ",
                 e.value("source", std::string("?")), ", is missing (listed in ", where, ")");
    uint64_t bytes = 0;
    const std::string crc = crc32c_hex(crc32c_file(p.string(), &bytes));
    STRATA_CHECK(e.at("crc32c").get<std::string>() == crc && e.at("bytes").get<uint64_t>() == bytes, "checkpoint: ",
                 p.string(), " (a tokenizer file) does not match its size and CRC-32C in ", where);
  }
  for (auto it = t.at("fields").begin(); it != t.at("fields").end(); ++it) {
    STRATA_CHECK(it.value().is_string() && t.at("files").contains(it.value().get<std::string>()), "checkpoint: ",
                 where, ": tokenizer.fields.", it.key(), " does not name one of tokenizer.files");
    const std::string copy = (dir / it.value().get<std::string>()).string();
    if (it.key() == "tokenizer_model") data.tokenizer_model = copy;
    else if (it.key() == "vocab_file") data.vocab_file = copy;
    else if (it.key() == "merge_file") data.merge_file = copy;
    else STRATA_THROW("checkpoint: ", where, ": tokenizer.fields names '", it.key(), "', not a data.* tokenizer field");
  }
}

}  // namespace strata
