// Megatron-LM indexed dataset (`<prefix>.bin` + `<prefix>.idx`), byte-compatible with
// megatron/core/datasets/indexed_dataset.py (_IndexWriter, _IndexReader, IndexedDatasetBuilder).
//
// .idx (little-endian, no padding):
//   0   9 bytes  magic "MMIDIDX\0\0"
//   9   u64      version = 1
//   17  u8       dtype code (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16)
//   18  u64      S = sequence count
//   26  u64      D = document_indices length (documents + 1)
//   34  int32[S] sequence lengths (unaligned: read with memcpy)
//   34+4S  int64[S] sequence pointers (byte offsets into .bin)
//   34+12S int64[D] document indices (0, then the sequence count at the end of each document)
//   [34+12S+8D int8[S] sequence modes — multimodal datasets only]
// .bin: the tokens of all sequences concatenated, no header.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/mapped_file.h"

namespace strata::formats {

enum class TokenDType : uint8_t { U8 = 1, I8 = 2, I16 = 3, I32 = 4, I64 = 5, F64 = 6, F32 = 7, U16 = 8 };

size_t token_dtype_size(TokenDType dtype);
const char* token_dtype_name(TokenDType dtype);
// Megatron DType.optimal_dtype: uint16 when vocab_size < 65500, else int32.
TokenDType optimal_dtype(int64_t vocab_size);

class IndexedDataset {
 public:
  // Opens `<prefix>.idx` and `<prefix>.bin` (memory-mapped) and validates: magic, version 1,
  // dtype code, counts against the .idx size, every sequence inside .bin, document indices
  // starting at 0, non-decreasing and ending at S. Errors: kind Io, naming the file.
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_doc_indices_ - 1; }
  bool has_sequence_modes() const { return has_modes_; }

  int64_t sequence_length(int64_t i) const;   // tokens in sequence i
  int64_t sequence_pointer(int64_t i) const;  // byte offset of sequence i in .bin
  std::vector<int32_t> sequence_lengths() const;  // all S lengths
  // document_indices()[d] .. [d+1] are the sequences of document d; size num_documents() + 1.
  std::vector<int64_t> document_indices() const;

  // Tokens [offset, offset + length) of sequence i, as int64; length -1: to the end.
  std::vector<int64_t> get(int64_t i, int64_t offset = 0, int64_t length = -1) const;
  void get(int64_t i, int64_t offset, int64_t length, int64_t* out) const;

 private:
  std::string prefix_;
  std::unique_ptr<MappedFile> idx_, bin_;
  TokenDType dtype_ = TokenDType::U16;
  int64_t num_sequences_ = 0, num_doc_indices_ = 0;
  bool has_modes_ = false;
};

// Writes `<prefix>.bin.tmp` while documents are added; finalize() writes `<prefix>.idx.tmp` and
// renames both. Destroyed without finalize(): the temporary files are removed.
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(const std::string& prefix, TokenDType dtype);
  // One sequence that is a whole document (Megatron: add_item + end_document).
  void add_document(const std::vector<int64_t>& tokens);
  // Sentence-level datasets: several sequences, then end_document().
  void add_sequence(const std::vector<int64_t>& tokens);
  void end_document();
  void finalize();

 private:
  std::string prefix_;
  TokenDType dtype_;
  std::unique_ptr<AtomicFileWriter> bin_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_indices_{0};
  bool finalized_ = false;
};

}  // namespace strata::formats
