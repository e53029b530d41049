// Documents and tokenization for `strata preprocess` (data/tokenizer_preprocess.h).
// Reference: Megatron-LM tools/preprocess_data.py.
#include "data/tokenizer_preprocess.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::data {
namespace {

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; });
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK_KIND(ErrorKind::Io, in.good(), "preprocess: cannot open input '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Tokenizes docs[i] into out[i] with `workers` threads (contiguous slices, one tokenizer each). A
// tokenizer's error names the document: where(i) ("corpus.jsonl line 7").
void tokenize_batch(const std::vector<std::string>& docs, std::vector<std::vector<int64_t>>& out,
                    std::vector<std::unique_ptr<Tokenizer>>& tokenizers, bool append_eod,
                    const std::function<std::string(size_t)>& where) {
  out.assign(docs.size(), {});
  const size_t workers = std::min(tokenizers.size(), std::max<size_t>(docs.size(), 1));
  auto work = [&](size_t w) {
    const size_t lo = docs.size() * w / workers, hi = docs.size() * (w + 1) / workers;
    for (size_t i = lo; i < hi; ++i) {
      try {
        out[i] = tokenizers[w]->encode(docs[i]);
      } catch (const Error& e) {
        throw Error(e.kind(), e.file(), e.line(), "preprocess: " + where(i) + ": " + e.message());
      }
      if (append_eod) out[i].push_back(tokenizers[w]->eod());
    }
  };
  if (workers <= 1) {
    work(0);
    return;
  }
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(workers);
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      try {
        work(w);
      } catch (...) { errors[w] = std::current_exception(); }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key) {
  return output_prefix + "_" + key + "_document";
}

bool is_jsonl_input(const std::string& path) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with(".jsonl") || ends_with(".json");
}

std::vector<std::string> split_text_documents(const std::string& text, bool split_paragraphs,
                                              std::vector<int64_t>* first_lines) {
  std::vector<std::string> docs;
  if (!split_paragraphs) {
    if (!is_blank(text)) {
      docs.push_back(text);
      if (first_lines) first_lines->push_back(1);
    }
    return docs;
  }
  std::string current;
  bool have = false;
  int64_t line_no = 0, first_line = 0;
  auto flush = [&] {
    if (have && !is_blank(current)) {
      docs.push_back(current);
      if (first_lines) first_lines->push_back(first_line);
    }
    current.clear();
    have = false;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    std::string_view line(text.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (is_blank(line)) {
      flush();
    } else {
      if (have) current.push_back('\n');
      if (!have) first_line = line_no;
      current.append(line);
      have = true;
    }
    pos = end + 1;
  }
  flush();
  return docs;
}

std::vector<std::string> read_jsonl_field(const std::string& text, const std::string& key, const std::string& source,
                                          std::vector<int64_t>* line_numbers) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (is_blank(line)) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      STRATA_THROW("preprocess: ", source, " line ", line_no, " is not valid JSON: ", e.what());
    }
    STRATA_CHECK(j.is_object(), "preprocess: ", source, " line ", line_no, " is not a JSON object");
    auto it = j.find(key);
    STRATA_CHECK(it != j.end(), "preprocess: ", source, " line ", line_no, " has no key \"", key, "\"");
    STRATA_CHECK(it->is_string(), "preprocess: ", source, " line ", line_no, " key \"", key, "\" is not a string");
    out.push_back(it->get<std::string>());
    if (line_numbers) line_numbers->push_back(line_no);
  }
  return out;
}

double PreprocessProgress::seconds_left() const {
  if (bytes <= 0 || seconds <= 0 || bytes >= total_bytes) return 0.0;
  return seconds * static_cast<double>(total_bytes - bytes) / static_cast<double>(bytes);
}

PreprocessStats tokenize_documents(const PreprocessOptions& options,
                                   const std::function<std::unique_ptr<Tokenizer>()>& make_tokenizer,
                                   const std::function<void(size_t, const std::vector<int64_t>&)>& sink) {
  STRATA_CHECK(!options.inputs.empty(), "preprocess: no input files");
  STRATA_CHECK(!options.json_keys.empty(), "preprocess: json_keys is empty");
  STRATA_CHECK(options.workers >= 1, "preprocess: workers must be >= 1, got ", options.workers);
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  for (int w = 0; w < options.workers; ++w) tokenizers.push_back(make_tokenizer());

  PreprocessStats stats;
  PreprocessProgress progress;
  for (const std::string& path : options.inputs)
    progress.total_bytes += static_cast<int64_t>(std::filesystem::file_size(path));
  const auto start = std::chrono::steady_clock::now();
  double reported = 0.0;
  std::vector<std::vector<int64_t>> tokens;
  // Batches of at most batch_documents, in order; progress after each when the interval passed.
  // lines[i]: the line docs[i] starts on in `path` (JSONL: its line), named in a tokenizer's error.
  auto emit = [&](size_t key_index, const std::vector<std::string>& docs, const std::string& path,
                  const std::vector<int64_t>& lines) {
    const size_t batch = std::max<size_t>(1, options.batch_documents);
    for (size_t first = 0; first < docs.size(); first += batch) {
      const std::vector<std::string> part(docs.begin() + static_cast<std::ptrdiff_t>(first),
                                          docs.begin() + static_cast<std::ptrdiff_t>(std::min(docs.size(), first + batch)));
      tokenize_batch(part, tokens, tokenizers, options.append_eod, [&](size_t i) {
        return path + " line " + std::to_string(lines.at(first + i)) +
               (is_jsonl_input(path) ? " (key \"" + options.json_keys[key_index] + "\")" : std::string());
      });
      for (size_t i = 0; i < tokens.size(); ++i) {
        sink(key_index, tokens[i]);
        stats.documents += 1;
        stats.tokens += static_cast<int64_t>(tokens[i].size());
        progress.bytes += static_cast<int64_t>(part[i].size());
      }
      progress.documents = stats.documents;
      progress.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (options.on_progress && progress.seconds - reported >= options.progress_interval_seconds) {
        reported = progress.seconds;
        options.on_progress(progress);
      }
    }
  };
  for (const std::string& path : options.inputs) {
    const std::string text = read_whole_file(path);
    std::vector<int64_t> lines;
    if (is_jsonl_input(path)) {
      for (size_t k = 0; k < options.json_keys.size(); ++k) {
        lines.clear();
        const std::vector<std::string> docs = read_jsonl_field(text, options.json_keys[k], path, &lines);
        emit(k, docs, path, lines);
      }
    } else {
      STRATA_CHECK(options.json_keys.size() == 1, "preprocess: plain-text input '", path,
                   "' has one document stream; give a single --json-keys");
      const std::vector<std::string> docs = split_text_documents(text, options.split_paragraphs, &lines);
      emit(0, docs, path, lines);
    }
  }
  return stats;
}

}  // namespace strata::data
