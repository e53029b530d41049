// Implements core/formats/indexed_dataset.h. Reference: Megatron-LM
// megatron/core/datasets/indexed_dataset.py (_INDEX_HEADER, _IndexWriter.write, _IndexReader).
#include "core/formats/indexed_dataset.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace strata::formats {

namespace {
static_assert(std::endian::native == std::endian::little, "indexed dataset I/O assumes a little-endian host");
constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 34;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void convert(const uint8_t* src, int64_t n, int64_t* out) {
  for (int64_t k = 0; k < n; ++k) out[k] = static_cast<int64_t>(load<T>(src + k * sizeof(T)));
}

// Float token files (Megatron's dtype codes 6 and 7): every token must be an integer that int64
// holds; the index of the first one that is not, else -1.
template <typename T>
int64_t convert_float(const uint8_t* src, int64_t n, int64_t* out) {
  for (int64_t k = 0; k < n; ++k) {
    const T v = load<T>(src + k * sizeof(T));
    if (!(v >= T(-9.2e18) && v <= T(9.2e18)) || v != std::trunc(v)) return k;
    out[k] = static_cast<int64_t>(v);
  }
  return -1;
}
}  // namespace

size_t token_dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::U8: case TokenDType::I8: return 1;
    case TokenDType::I16: case TokenDType::U16: return 2;
    case TokenDType::I32: case TokenDType::F32: return 4;
    case TokenDType::I64: case TokenDType::F64: return 8;
  }
  return 0;
}

const char* token_dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::U8: return "uint8";
    case TokenDType::I8: return "int8";
    case TokenDType::I16: return "int16";
    case TokenDType::I32: return "int32";
    case TokenDType::I64: return "int64";
    case TokenDType::F64: return "float64";
    case TokenDType::F32: return "float32";
    case TokenDType::U16: return "uint16";
  }
  return "?";
}

TokenDType optimal_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::U16 : TokenDType::I32;
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  idx_ = std::make_unique<MappedFile>(idx_path);
  const uint8_t* p = idx_->data();
  const uint64_t size = idx_->size();
  STRATA_IO_CHECK(size >= kHeaderBytes, idx_path, "file has ", size, " bytes, shorter than the 34-byte header");
  STRATA_IO_CHECK(std::memcmp(p, kMagic, 9) == 0, idx_path, "bad magic (not a Megatron MMIDIDX index)");
  uint64_t version = load<uint64_t>(p + 9);
  STRATA_IO_CHECK(version == 1, idx_path, "unsupported version ", version, " (expected 1)");
  uint8_t code = p[17];
  STRATA_IO_CHECK(code >= 1 && code <= 8, idx_path, "unknown dtype code ", int(code), " (expected 1..8)");
  dtype_ = static_cast<TokenDType>(code);
  uint64_t S = load<uint64_t>(p + 18), D = load<uint64_t>(p + 26);
  const uint64_t body = size - kHeaderBytes;
  STRATA_IO_CHECK(S <= body / 12 && D >= 1 && D <= (body - 12 * S) / 8, idx_path, "counts (", S, " sequences, ", D,
                  " document indices) do not fit a ", size, "-byte file (truncated or corrupt)");
  const uint64_t expected = kHeaderBytes + 12 * S + 8 * D;
  has_modes_ = size == expected + S && S > 0;
  STRATA_IO_CHECK(size == expected || has_modes_, idx_path, "file has ", size, " bytes but ", S, " sequences and ",
                  D, " document indices need ", expected, " (or ", expected + S,
                  " with sequence modes): truncated or corrupt");
  num_sequences_ = static_cast<int64_t>(S);
  num_doc_indices_ = static_cast<int64_t>(D);

  bin_ = std::make_unique<MappedFile>(bin_path);
  const uint64_t bin_size = bin_->size(), itemsize = token_dtype_size(dtype_);
  for (int64_t i = 0; i < num_sequences_; ++i) {
    int64_t len = sequence_length(i), ptr = sequence_pointer(i);
    STRATA_IO_CHECK(len >= 0, idx_path, "sequence ", i, " has negative length ", len);
    STRATA_IO_CHECK(ptr >= 0 && static_cast<uint64_t>(ptr) <= bin_size &&
                        static_cast<uint64_t>(len) * itemsize <= bin_size - static_cast<uint64_t>(ptr),
                    idx_path, "sequence ", i, " (", len, " tokens at byte ", ptr, ") lies outside ", bin_path,
                    " (", bin_size, " bytes)");
  }
  const uint8_t* docs = p + kHeaderBytes + 12 * S;
  int64_t prev = 0;
  for (int64_t d = 0; d < num_doc_indices_; ++d) {
    int64_t v = load<int64_t>(docs + 8 * d);
    STRATA_IO_CHECK(d > 0 || v == 0, idx_path, "document_indices[0] is ", v, ", expected 0");
    STRATA_IO_CHECK(v >= prev && v <= num_sequences_, idx_path, "document_indices[", d, "] = ", v,
                    " is not non-decreasing within [0, ", num_sequences_, "]");
    prev = v;
  }
  STRATA_IO_CHECK(prev == num_sequences_, idx_path, "last document index is ", prev, ", expected the sequence count ",
                  num_sequences_);
}

int64_t IndexedDataset::sequence_length(int64_t i) const {
  STRATA_CHECK(i >= 0 && i < num_sequences_, "IndexedDataset(", prefix_, "): sequence ", i, " out of range [0, ",
               num_sequences_, ")");
  return load<int32_t>(idx_->data() + kHeaderBytes + 4 * i);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  STRATA_CHECK(i >= 0 && i < num_sequences_, "IndexedDataset(", prefix_, "): sequence ", i, " out of range [0, ",
               num_sequences_, ")");
  return load<int64_t>(idx_->data() + kHeaderBytes + 4 * num_sequences_ + 8 * i);
}

std::vector<int32_t> IndexedDataset::sequence_lengths() const {
  std::vector<int32_t> out(num_sequences_);
  if (num_sequences_ > 0) std::memcpy(out.data(), idx_->data() + kHeaderBytes, 4 * num_sequences_);
  return out;
}

std::vector<int64_t> IndexedDataset::document_indices() const {
  std::vector<int64_t> out(num_doc_indices_);
  std::memcpy(out.data(), idx_->data() + kHeaderBytes + 12 * num_sequences_, 8 * num_doc_indices_);
  return out;
}

std::vector<int64_t> IndexedDataset::get(int64_t i, int64_t offset, int64_t length) const {
  int64_t n = sequence_length(i);
  if (length < 0) length = n - offset;
  std::vector<int64_t> out(std::max<int64_t>(length, 0));
  get(i, offset, length, out.data());
  return out;
}

void IndexedDataset::get(int64_t i, int64_t offset, int64_t length, int64_t* out) const {
  int64_t n = sequence_length(i);
  STRATA_CHECK(offset >= 0 && length >= 0 && offset + length <= n, "IndexedDataset(", prefix_, ").get: tokens [",
               offset, ", ", offset + length, ") outside sequence ", i, " of length ", n);
  const uint8_t* src = bin_->data() + sequence_pointer(i) + offset * token_dtype_size(dtype_);
  if (length == 0) return;
  switch (dtype_) {
    case TokenDType::U8: convert<uint8_t>(src, length, out); break;
    case TokenDType::I8: convert<int8_t>(src, length, out); break;
    case TokenDType::I16: convert<int16_t>(src, length, out); break;
    case TokenDType::I32: convert<int32_t>(src, length, out); break;
    case TokenDType::I64: convert<int64_t>(src, length, out); break;
    case TokenDType::F64: case TokenDType::F32: {
      const int64_t bad = dtype_ == TokenDType::F64 ? convert_float<double>(src, length, out)
                                                    : convert_float<float>(src, length, out);
      STRATA_CHECK_KIND(ErrorKind::Io, bad < 0, prefix_, ".bin: token ", offset + bad, " of sequence ", i,
                        " is not an integer token id (a ", token_dtype_name(dtype_), " file)");
      break;
    }
    case TokenDType::U16: convert<uint16_t>(src, length, out); break;
  }
}

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& prefix, TokenDType dtype)
    : prefix_(prefix), dtype_(dtype) {
  STRATA_CHECK(static_cast<int>(dtype) >= 1 && static_cast<int>(dtype) <= 8, "IndexedDatasetBuilder(", prefix,
               "): bad dtype code ", static_cast<int>(dtype));
  bin_ = std::make_unique<AtomicFileWriter>(prefix + ".bin");
}

void IndexedDatasetBuilder::add_sequence(const std::vector<int64_t>& tokens) {
  STRATA_CHECK(!finalized_, "IndexedDatasetBuilder(", prefix_, "): add after finalize()");
  STRATA_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX), "IndexedDatasetBuilder(", prefix_,
               "): a sequence of ", tokens.size(), " tokens exceeds the int32 length field");
  const size_t itemsize = token_dtype_size(dtype_);
  std::vector<uint8_t> bytes(tokens.size() * itemsize);
  auto put = [&](auto tag, size_t k, int64_t v) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) {
      bool fits = v < 0 ? (std::is_signed_v<T> && v >= static_cast<int64_t>(std::numeric_limits<T>::min()))
                        : static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
      STRATA_CHECK(fits, "IndexedDatasetBuilder(", prefix_, "): token ", v, " does not fit ", token_dtype_name(dtype_));
    }
    T x = static_cast<T>(v);
    std::memcpy(bytes.data() + k * sizeof(T), &x, sizeof(T));
  };
  for (size_t k = 0; k < tokens.size(); ++k) {
    int64_t v = tokens[k];
    switch (dtype_) {
      case TokenDType::U8: put(uint8_t{}, k, v); break;
      case TokenDType::I8: put(int8_t{}, k, v); break;
      case TokenDType::I16: put(int16_t{}, k, v); break;
      case TokenDType::I32: put(int32_t{}, k, v); break;
      case TokenDType::I64: put(int64_t{}, k, v); break;
      case TokenDType::F64: put(double{}, k, v); break;
      case TokenDType::F32: put(float{}, k, v); break;
      case TokenDType::U16: put(uint16_t{}, k, v); break;
    }
  }
  bin_->write(bytes.data(), bytes.size());
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void IndexedDatasetBuilder::end_document() {
  STRATA_CHECK(!finalized_, "IndexedDatasetBuilder(", prefix_, "): end_document after finalize()");
  doc_indices_.push_back(static_cast<int64_t>(lengths_.size()));
}

void IndexedDatasetBuilder::add_document(const std::vector<int64_t>& tokens) {
  add_sequence(tokens);
  end_document();
}

void IndexedDatasetBuilder::finalize() {
  STRATA_CHECK(!finalized_, "IndexedDatasetBuilder(", prefix_, "): finalize() called twice");
  if (doc_indices_.back() != static_cast<int64_t>(lengths_.size())) end_document();  // close an open document
  const uint64_t S = lengths_.size(), D = doc_indices_.size();
  const uint8_t code = static_cast<uint8_t>(dtype_);
  const uint64_t version = 1;
  std::vector<uint8_t> idx(kHeaderBytes + 12 * S + 8 * D);
  uint8_t* p = idx.data();
  std::memcpy(p, kMagic, 9);
  std::memcpy(p + 9, &version, 8);
  p[17] = code;
  std::memcpy(p + 18, &S, 8);
  std::memcpy(p + 26, &D, 8);
  if (S > 0) std::memcpy(p + kHeaderBytes, lengths_.data(), 4 * S);
  int64_t ptr = 0;
  for (uint64_t i = 0; i < S; ++i) {
    std::memcpy(p + kHeaderBytes + 4 * S + 8 * i, &ptr, 8);
    ptr += static_cast<int64_t>(lengths_[i]) * static_cast<int64_t>(token_dtype_size(dtype_));
  }
  std::memcpy(p + kHeaderBytes + 12 * S, doc_indices_.data(), 8 * D);
  bin_->commit();
  write_file_atomic(prefix_ + ".idx", idx.data(), idx.size());
  finalized_ = true;
}

}  // namespace strata::formats
