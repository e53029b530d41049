// Implements core/formats/mapped_file.h with POSIX mmap/open/write/rename.
#include "core/formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace strata::formats {

namespace {
std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    STRATA_IO_CHECK(w > 0, path, "write failed: ", errno_text());
    p += w;
    n -= static_cast<size_t>(w);
  }
}
}  // namespace

MappedFile::MappedFile(const std::string& path, bool copy_on_write) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  STRATA_IO_CHECK(fd >= 0, path, "cannot open for reading: ", errno_text());
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    std::string why = errno_text();
    ::close(fd);
    STRATA_IO_THROW(path, "cannot stat: ", why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    STRATA_IO_THROW(path, "not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    int prot = copy_on_write ? (PROT_READ | PROT_WRITE) : PROT_READ;
    void* p = ::mmap(nullptr, size_, prot, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string why = errno_text();
      ::close(fd);
      STRATA_IO_THROW(path, "cannot memory-map ", size_, " bytes: ", why);
    }
    data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path), tmp_path_(path + ".tmp") {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STRATA_IO_CHECK(fd_ >= 0, tmp_path_, "cannot open for writing: ", errno_text());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void AtomicFileWriter::flush_buffer() {
  if (!buffer_.empty()) write_all(fd_, buffer_.data(), buffer_.size(), tmp_path_);
  buffer_.clear();
}

void AtomicFileWriter::write(const void* data, size_t n) {
  STRATA_IO_CHECK(!committed_, path_, "write after commit");
  constexpr size_t kBuffer = 1 << 20;
  written_ += n;
  if (buffer_.size() + n > kBuffer) {
    flush_buffer();
    if (n >= kBuffer) {
      write_all(fd_, data, n, tmp_path_);
      return;
    }
  }
  buffer_.append(static_cast<const char*>(data), n);
}

void AtomicFileWriter::commit() {
  STRATA_IO_CHECK(!committed_, path_, "committed twice");
  flush_buffer();
  STRATA_IO_CHECK(::fsync(fd_) == 0, tmp_path_, "fsync failed: ", errno_text());
  int rc = ::close(fd_);
  fd_ = -1;
  STRATA_IO_CHECK(rc == 0, tmp_path_, "close failed: ", errno_text());
  STRATA_IO_CHECK(::rename(tmp_path_.c_str(), path_.c_str()) == 0, path_,
                  "cannot rename ", tmp_path_, " to it: ", errno_text());
  committed_ = true;
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  AtomicFileWriter w(path);
  w.write(data, n);
  w.commit();
}

AppendFile::AppendFile(const std::string& path, bool append) : path_(path) {
  if (!append || ::access(path.c_str(), F_OK) != 0) write_file_atomic(path, "", 0);
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  STRATA_IO_CHECK(fd_ >= 0, path, "cannot open for appending: ", errno_text());
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append(const void* data, size_t n) { write_all(fd_, data, n, path_); }

}  // namespace strata::formats
