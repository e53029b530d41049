// A checkpoint carries its tokenizer. When an iteration is saved, the files its config's data
// section names (data.tokenizer_model: a tokenizer.json with its tokenizer_config.json /
// special_tokens_map.json, a SentencePiece model, or TikTokenizer's vocabulary JSON as
// tiktoken.json; data.vocab_file + data.merge_file for GPT-2 BPE)
// are copied into the iteration directory (iter_X/tokenizer/) and listed in manifest.json's
// "tokenizer" member with their size and CRC-32C. Readers of the checkpoint's model (`strata
// generate`, `strata export`) use those copies, never the paths of the saved config, which are as
// the training run was given them (relative to its working directory, or moved since): a copied
// or moved checkpoint brings its own tokenizer and never silently uses another.
// Reference: Megatron-LM saves the tokenizer arguments (args) in the checkpoint but not the files
// (tools/checkpoint/convert.py needs --tokenizer-model again); transformers' save_pretrained writes
// the tokenizer files next to the weights, which is the behaviour kept here, per iteration.
// Layout and manifest member: docs/formats.md "Checkpoints".
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "data/data_config.h"

namespace strata {

// Copies the tokenizer files of the config (the YAML text saved as the manifest's "config") into
// iter_dir/tokenizer/ and returns the manifest's "tokenizer" member:
//   {"type": "HuggingFaceTokenizer", "fields": {"tokenizer_model": "tokenizer/tokenizer.json"},
//    "files": {"tokenizer/tokenizer.json": {"crc32c": "…", "bytes": N, "source": "/abs/path"}, …}}
// ("files" and "fields" empty for the byte-level and null tokenizers). A file the config names that
// does not exist is an error naming the field and the path. Null when config_yaml is empty.
nlohmann::json save_checkpoint_tokenizer(const std::string& config_yaml, const std::filesystem::path& iter_dir);

// Points data's tokenizer fields at the copies listed by the manifest's "tokenizer" member, after
// checking each copy's size and CRC-32C (a missing or altered copy is an error naming it and the
// manifest). A manifest without the member (saved before checkpoints carried their tokenizer)
// leaves data as saved.
void use_checkpoint_tokenizer(const nlohmann::json& manifest, const std::filesystem::path& manifest_path,
                              DataConfig& data);

}  // namespace strata
