// The tokenizing half of `strata preprocess`: input files → documents → token ids, in input order,
// independent of the dataset writer (apps/strata/cmd_preprocess.cpp feeds the result to
// IndexedDatasetBuilder). Inputs are plain text (the whole file is one document, or with
// split_paragraphs one document per blank-line-separated paragraph) or JSONL (one JSON object per
// line; each of json_keys is one document stream, written to its own `<prefix>_<key>_document`).
// Reference: Megatron-LM tools/preprocess_data.py (Encoder.encode, output naming, --append-eod).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace strata::data {

// Where a long run stands (Megatron's preprocess_data.py prints "Processed N documents (… docs/s,
// … MB/s)"): documents and text bytes tokenized so far, of the inputs' total bytes, and the time.
struct PreprocessProgress {
  int64_t documents = 0;
  int64_t bytes = 0;        // document text tokenized (separators and JSON syntax not counted)
  int64_t total_bytes = 0;  // the input files' sizes
  double seconds = 0;
  double mb_per_second() const { return seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0; }
  // The time left at this pace (0 when nothing is done yet or the inputs are done).
  double seconds_left() const;
};

struct PreprocessOptions {
  std::vector<std::string> inputs;                // files; *.jsonl / *.json are JSONL, the rest plain text
  std::vector<std::string> json_keys = {"text"};  // JSONL fields; plain text is the key "text"
  bool split_paragraphs = false;                  // plain text: one document per paragraph
  bool append_eod = false;                        // append tokenizer.eod() to every document
  int workers = 1;                                // tokenizing threads (one tokenizer each)
  // Called after a batch of documents when progress_interval_seconds have passed since the last
  // call (documents are tokenized in batches of at most batch_documents, in input order).
  std::function<void(const PreprocessProgress&)> on_progress;
  double progress_interval_seconds = 5.0;
  size_t batch_documents = 4096;
};

struct PreprocessStats {
  int64_t documents = 0;  // per key, summed over keys
  int64_t tokens = 0;     // including the appended EOD ids
};

// "<prefix>_<key>_document" (Megatron's naming; ".bin"/".idx" are added by the writer).
std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key);

// Whether `path` is read as JSONL (extension .jsonl or .json).
bool is_jsonl_input(const std::string& path);

// The documents of a plain-text file: the whole text, or its paragraphs (lines up to a line that
// is empty or whitespace-only, joined with '\n'). Whitespace-only documents are dropped.
// first_lines (optional): the 1-based line each document starts on.
std::vector<std::string> split_text_documents(const std::string& text, bool split_paragraphs,
                                              std::vector<int64_t>* first_lines = nullptr);

// The string field `key` of every non-blank line of a JSONL text; errors name `source` and the line.
// line_numbers (optional): the 1-based line of each document.
std::vector<std::string> read_jsonl_field(const std::string& text, const std::string& key, const std::string& source,
                                          std::vector<int64_t>* line_numbers = nullptr);

// Reads every input in order and calls sink(key_index, tokens) for every document, in input order
// (per key), whatever the number of workers. make_tokenizer is called once per worker.
PreprocessStats tokenize_documents(const PreprocessOptions& options,
                                   const std::function<std::unique_ptr<Tokenizer>()>& make_tokenizer,
                                   const std::function<void(size_t key_index, const std::vector<int64_t>& tokens)>& sink);

}  // namespace strata::data
