// File helpers shared by the format readers and writers (core/formats/*):
//  - MappedFile: a read-only (or private copy-on-write) memory map of a whole file, so readers
//    validate and read in place (Megatron's indexed dataset reader and safetensors both mmap).
//  - AtomicFileWriter: writes `<path>.tmp` and renames it to `<path>` on commit(), so a crash
//    never leaves a half-written file under the final name (POSIX rename is atomic).
//  - AppendFile: a file created atomically (empty `<path>.tmp` renamed) and then appended to in
//    whole records, for streaming logs (tfevents, JSONL).
// Every failure throws strata::Error of kind Io whose message starts with the file name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

// All format errors: kind Io, message "<path>: <what is wrong>".
#define STRATA_IO_CHECK(cond, path, ...) \
  STRATA_CHECK_KIND(::strata::ErrorKind::Io, cond, path, ": ", __VA_ARGS__)
#define STRATA_IO_THROW(path, ...) STRATA_THROW_KIND(::strata::ErrorKind::Io, path, ": ", __VA_ARGS__)

namespace strata::formats {

class MappedFile {
 public:
  // copy_on_write: map PROT_READ|PROT_WRITE, MAP_PRIVATE — writes through the mapping stay
  // private to this process (used for tensors that alias the file).
  explicit MappedFile(const std::string& path, bool copy_on_write = false);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }  // nullptr for an empty file
  uint8_t* mutable_data() const { return data_; }  // only meaningful with copy_on_write
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);  // creates/truncates `<path>.tmp`
  ~AtomicFileWriter();                                 // without commit(): removes the .tmp file
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);  // buffered
  uint64_t bytes_written() const { return written_; }
  void commit();  // flush, fsync, close, rename `<path>.tmp` -> `<path>`
  const std::string& path() const { return path_; }

 private:
  void flush_buffer();
  std::string path_, tmp_path_;
  int fd_ = -1;
  std::string buffer_;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Whole-file convenience: `<path>.tmp` + rename.
void write_file_atomic(const std::string& path, const void* data, size_t n);

class AppendFile {
 public:
  // append == false: creates an empty file atomically (replacing any old one);
  // append == true: appends to an existing file (created atomically if absent).
  AppendFile(const std::string& path, bool append);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  // Writes all bytes with write(2) calls on an O_APPEND descriptor (records land whole unless
  // the process dies mid-call).
  void append(const void* data, size_t n);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace strata::formats
