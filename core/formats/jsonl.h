// JSONL metrics sink: one JSON object per line (torchtitan's structured logger, Megatron's router
// traces write this), buffered in memory and appended whole on flush() or destruction, so a
// training step never waits on the file system between log intervals.
// The file is created atomically (empty `<path>.tmp` renamed) unless appending to an existing one.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/formats/mapped_file.h"

namespace strata::formats {

class JsonlWriter {
 public:
  // append: keep an existing file's lines (a resumed run); otherwise start an empty file.
  // flush_bytes: flush automatically once this many bytes are buffered.
  explicit JsonlWriter(const std::string& path, bool append = false, size_t flush_bytes = 1 << 20);
  ~JsonlWriter();  // flushes; errors are logged, not thrown
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  void write(const nlohmann::json& object);  // must be a JSON object (Value error otherwise)
  void flush();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<AppendFile> file_;
  std::string buffer_;
  size_t flush_bytes_;
};

// Every line as a JSON object. A line that is not a JSON object, or a last line without its
// newline (a truncated file), throws strata::Error (kind Io) naming the file and line number.
std::vector<nlohmann::json> read_jsonl(const std::string& path);

}  // namespace strata::formats
