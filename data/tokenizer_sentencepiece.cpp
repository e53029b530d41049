// SentencePieceTokenizer (data/tokenizer_sentencepiece.h) over libsentencepiece.
// Reference: megatron/core/tokenizers/text/libraries/sentencepiece_tokenizer.py; google/sentencepiece
// src/sentencepiece_processor.h.
#include "data/tokenizer_sentencepiece.h"

#include <sentencepiece_processor.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "core/error.h"
#include "data/utf8.h"

namespace strata::data {

namespace {
// libsentencepiece's reason without its source location and checked condition
// ("./src/sentencepiece_processor.cc(1101) [model_proto->ParseFromArray(...)] "): what is left, or
// nothing when that was all.
std::string library_reason(const sentencepiece::util::Status& status) {
  static const std::regex location(R"((\S*/)?[A-Za-z0-9_.]+\.(cc|cpp|h)\(\d+\)\s*(\[[^\]]*\]\s*)?)");
  std::string reason = std::regex_replace(std::string(status.message()), location, "");
  while (!reason.empty() && (reason.back() == ' ' || reason.back() == '\n')) reason.pop_back();
  return reason.empty() ? std::string() : " (" + reason + ")";
}
// Protocol-buffer framing of a serialized ModelProto's top level, checked before the library parses
// it: every field's wire type is one a model uses (varint, 64-bit, length-delimited, 32-bit) and
// every length-delimited field (the pieces, the trainer and normalizer specs) fits in the bytes
// left. libsentencepiece's protobuf does not check a top-level submessage's declared length up front
// and reserves memory for what it claims (a 60 KB file asked for 22 MB); inside a submessage whose
// length fits, protobuf bounds every length by it. "" when the framing holds, else what is wrong.
std::string protobuf_framing_problem(const std::string& bytes) {
  size_t pos = 0;
  auto varint = [&](uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && pos < bytes.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(bytes[pos++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  while (pos < bytes.size()) {
    const size_t at = pos;
    uint64_t key = 0, n = 0;
    if (!varint(key)) return "a truncated field key at byte " + std::to_string(at);
    switch (key & 7) {
      case 0:
        if (!varint(n)) return "a truncated varint at byte " + std::to_string(at);
        break;
      case 1: case 5:
        n = (key & 7) == 1 ? 8 : 4;
        if (n > bytes.size() - pos) return "a truncated fixed-size field at byte " + std::to_string(at);
        pos += n;
        break;
      case 2:
        if (!varint(n) || n > bytes.size() - pos)
          return "field " + std::to_string(key >> 3) + " at byte " + std::to_string(at) + " claims more bytes than the file has";
        pos += n;
        break;
      default:
        return "wire type " + std::to_string(key & 7) + " at byte " + std::to_string(at);
    }
  }
  return "";
}
}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_file, std::string type_name)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()), type_name_(std::move(type_name)) {
  STRATA_CHECK_KIND(ErrorKind::Io, std::filesystem::is_regular_file(model_file), type_name_, ": ", model_file,
                    " is not a readable file (data.tokenizer_model: a SentencePiece tokenizer.model)");
  std::ifstream in(model_file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  STRATA_CHECK_KIND(ErrorKind::Io, !in.bad(), type_name_, ": cannot read ", model_file);
  const std::string framing = protobuf_framing_problem(bytes);
  STRATA_CHECK_KIND(ErrorKind::Config, framing.empty(), type_name_, ": ", model_file,
                    " is not a SentencePiece model (truncated or another format: ", framing, ")");
  sentencepiece::util::Status status;
  try {
    status = sp_->LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {
    // The library throws from inside its loaders on some malformed models (darts_clone's trie
    // refuses an empty piece) instead of returning a status; that is a bad model file too.
    STRATA_THROW_KIND(ErrorKind::Config, type_name_, ": ", model_file, " is not a usable SentencePiece model (",
                      e.what(), ")");
  }
  STRATA_CHECK_KIND(ErrorKind::Config, status.ok(), type_name_, ": ", model_file,
                    " is not a SentencePiece model (truncated or another format)", library_reason(status));
  vocab_size_ = sp_->GetPieceSize();
  STRATA_CHECK_KIND(ErrorKind::Config, sp_->eos_id() >= 0, type_name_, ": ", model_file,
                    " has no EOS piece; Megatron's end-of-document id is the model's eos id");
  eod_ = sp_->eos_id();
  if (sp_->bos_id() >= 0) bos_ = sp_->bos_id();
  if (sp_->pad_id() >= 0) pad_ = sp_->pad_id();
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int64_t> SentencePieceTokenizer::encode(std::string_view text) const {
  const std::vector<int> ids = sp_->EncodeAsIds(utf8_replace_invalid(text));
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> in;
  in.reserve(ids.size());
  for (int64_t id : ids) {
    STRATA_CHECK(id >= 0 && id < vocab_size_, type_name_, ".decode: id ", id, " is outside [0, ", vocab_size_, ")");
    in.push_back(static_cast<int>(id));
  }
  return sp_->DecodeIds(in);
}

}  // namespace strata::data
