// Implements core/formats/jsonl.h with nlohmann::json (compact dump, one object per line).
#include "core/formats/jsonl.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/logging.h"

namespace strata::formats {

JsonlWriter::JsonlWriter(const std::string& path, bool append, size_t flush_bytes)
    : path_(path), file_(std::make_unique<AppendFile>(path, append)), flush_bytes_(flush_bytes) {}

JsonlWriter::~JsonlWriter() {
  try {
    flush();
  } catch (const std::exception& e) {
    strata::log::error("JsonlWriter {}: {}", path_, e.what());
  }
}

void JsonlWriter::write(const nlohmann::json& object) {
  STRATA_CHECK(object.is_object(), "JsonlWriter(", path_, "): each record must be a JSON object, got ",
               object.type_name());
  // Invalid UTF-8 in strings is replaced rather than thrown: a metrics sink must not stop training.
  buffer_ += object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  buffer_ += '\n';
  if (buffer_.size() >= flush_bytes_) flush();
}

void JsonlWriter::flush() {
  if (buffer_.empty()) return;
  file_->append(buffer_.data(), buffer_.size());
  buffer_.clear();
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  MappedFile file(path);
  const char* p = reinterpret_cast<const char*>(file.data());
  const size_t size = file.size();
  std::vector<nlohmann::json> out;
  size_t pos = 0;
  for (int64_t line = 1; pos < size; ++line) {
    const void* nl = std::memchr(p + pos, '\n', size - pos);
    STRATA_IO_CHECK(nl != nullptr, path, "line ", line, " has no terminating newline (truncated file)");
    size_t end = static_cast<const char*>(nl) - p;
    nlohmann::json j = nlohmann::json::parse(p + pos, p + end, nullptr, /*allow_exceptions=*/false);
    STRATA_IO_CHECK(!j.is_discarded(), path, "line ", line, " is not valid JSON");
    STRATA_IO_CHECK(j.is_object(), path, "line ", line, " is not a JSON object");
    out.push_back(std::move(j));
    pos = end + 1;
  }
  return out;
}

}  // namespace strata::formats
