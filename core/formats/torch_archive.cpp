// torch.save archives (see torch_archive.h): the zip central directory, the storage records and
// the tensors they back.
// Reference: PKWARE APPNOTE.TXT 4.3 (zip structures, zip64), caffe2/serialize/inline_container.cc
// (PyTorchStreamReader), torch/serialization.py (_load, the 'byteorder' record).
#include "core/formats/torch_archive.h"

#include <cstring>

#include "core/formats/crc32.h"
#include "core/formats/mapped_file.h"
#include "core/formats/pickle_reader.h"

namespace strata::formats {

namespace {

uint64_t le(const uint8_t* p, int n) {
  uint64_t x = 0;
  for (int i = 0; i < n; ++i) x |= static_cast<uint64_t>(p[i]) << (8 * i);
  return x;
}

// Whether a record's bytes match its CRC-32. The fuzz build (STRATA_FUZZ, docs/fuzzing.md) accepts
// any CRC, so that mutated records reach the pickle and tensor code instead of stopping here;
// libFuzzer's FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION convention marks that build.
bool crc_matches(const uint8_t* data, uint64_t size, uint32_t crc) {
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  (void)data, (void)size, (void)crc;
  return true;
#else
  return crc32(data, size) == crc;
#endif
}

constexpr uint32_t kEocd = 0x06054b50, kZip64Locator = 0x07064b50, kZip64Eocd = 0x06064b50,
                   kCentral = 0x02014b50, kLocal = 0x04034b50;

}  // namespace

ZipView::ZipView(const uint8_t* data, size_t size, std::string source)
    : data_(data), size_(size), source_(std::move(source)) {
  auto in = [&](uint64_t off, uint64_t n) { return off <= size_ && n <= size_ - off; };
  STRATA_IO_CHECK(size_ >= 22, source_, "not a zip archive (", size_, " bytes: truncated?)");
  // The end-of-central-directory record: the last signature within its maximal comment length.
  int64_t eocd = -1;
  for (int64_t pos = static_cast<int64_t>(size_) - 22; pos >= 0 && pos >= static_cast<int64_t>(size_) - 22 - 65535; --pos)
    if (le(data_ + pos, 4) == kEocd) {
      eocd = pos;
      break;
    }
  STRATA_IO_CHECK(eocd >= 0, source_, "not a zip archive (no end-of-central-directory record: truncated?)");
  uint64_t count = le(data_ + eocd + 10, 2), cd_size = le(data_ + eocd + 12, 4), cd_off = le(data_ + eocd + 16, 4);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {  // zip64
    STRATA_IO_CHECK(eocd >= 20 && le(data_ + eocd - 20, 4) == kZip64Locator, source_, "zip64 locator missing");
    const uint64_t z = le(data_ + eocd - 12, 8);
    STRATA_IO_CHECK(in(z, 56) && le(data_ + z, 4) == kZip64Eocd, source_, "zip64 end record missing");
    count = le(data_ + z + 32, 8);
    cd_size = le(data_ + z + 40, 8);
    cd_off = le(data_ + z + 48, 8);
  }
  STRATA_IO_CHECK(in(cd_off, cd_size) && count <= cd_size / 46, source_, "the central directory (", count,
                  " entries at ", cd_off, ") lies outside the file (truncated?)");
  uint64_t pos = cd_off;
  for (uint64_t i = 0; i < count; ++i) {
    STRATA_IO_CHECK(in(pos, 46) && le(data_ + pos, 4) == kCentral, source_, "central directory entry ", i, " is corrupt");
    const uint8_t* c = data_ + pos;
    Entry e;
    e.stored = le(c + 10, 2) == 0;
    e.crc = static_cast<uint32_t>(le(c + 16, 4));
    uint64_t csize = le(c + 20, 4), usize = le(c + 24, 4), local = le(c + 42, 4);
    const uint64_t nlen = le(c + 28, 2), xlen = le(c + 30, 2), clen = le(c + 32, 2);
    STRATA_IO_CHECK(in(pos + 46, nlen + xlen + clen), source_, "central directory entry ", i, " is truncated");
    e.name.assign(reinterpret_cast<const char*>(c + 46), nlen);
    for (uint64_t x = 0; x + 4 <= xlen;) {  // the zip64 extra field: the 0xFFFFFFFF sizes, in order
      const uint8_t* f = c + 46 + nlen + x;
      const uint64_t id = le(f, 2), len = le(f + 2, 2);
      STRATA_IO_CHECK(x + 4 + len <= xlen, source_, "entry ", e.name, " has a corrupt extra field");
      if (id == 1) {
        uint64_t k = 0;
        for (uint64_t* v : {&usize, &csize, &local})
          if (*v == 0xFFFFFFFF) {
            STRATA_IO_CHECK(k + 8 <= len, source_, "entry ", e.name, " has a short zip64 field");
            *v = le(f + 4 + k, 8);
            k += 8;
          }
      }
      x += 4 + len;
    }
    STRATA_IO_CHECK(in(local, 30) && le(data_ + local, 4) == kLocal, source_, "entry ", e.name,
                    ": local header missing (truncated or corrupt)");
    e.data_offset = local + 30 + le(data_ + local + 26, 2) + le(data_ + local + 28, 2);
    e.size = usize;
    STRATA_IO_CHECK(!e.stored || csize == usize, source_, "entry ", e.name, " has inconsistent sizes");
    STRATA_IO_CHECK(in(e.data_offset, csize), source_, "entry ", e.name, " runs past the end of the file (",
                    size_, " bytes: truncated?)");
    entries_.push_back(std::move(e));
    pos += 46 + nlen + xlen + clen;
  }
}

const ZipView::Entry* ZipView::find(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

std::string ZipView::read(const std::string& name) const {
  const Entry* e = find(name);
  STRATA_IO_CHECK(e, source_, "has no record ", name);
  STRATA_IO_CHECK(e->stored, source_, "record ", name, " is compressed (PyTorch stores records uncompressed)");
  STRATA_IO_CHECK(crc_matches(data(*e), e->size, e->crc), source_, "record ", name, " fails its CRC-32 (corrupt)");
  return std::string(reinterpret_cast<const char*>(data(*e)), e->size);
}

TorchArchive::TorchArchive(const uint8_t* data, size_t size, const std::string& source) : zip(data, size, source) {
  for (const auto& e : zip.entries()) {
    const std::string tail = "data.pkl";
    if (e.name.size() >= tail.size() && e.name.compare(e.name.size() - tail.size(), tail.size(), tail) == 0 &&
        (e.name.size() == tail.size() || e.name[e.name.size() - tail.size() - 1] == '/')) {
      prefix = e.name.substr(0, e.name.size() - tail.size());
      break;
    }
  }
  STRATA_IO_CHECK(zip.find(prefix + "data.pkl"), source, "is a zip archive without a data.pkl: not a torch.save file");
  if (zip.find(prefix + "byteorder"))
    STRATA_IO_CHECK(zip.read(prefix + "byteorder") == "little", source, "holds big-endian tensors, which are not supported");
  const std::string pkl = zip.read(prefix + "data.pkl");
  root = unpickle_restricted(reinterpret_cast<const uint8_t*>(pkl.data()), pkl.size(), source + ":" + prefix + "data.pkl");
}

Tensor TorchArchive::tensor(const PyTensorRef& t) const {
  const std::string rec = prefix + "data/" + t.storage_key;
  const ZipView::Entry* e = zip.find(rec);
  STRATA_IO_CHECK(e, zip.source(), "has no storage record ", rec);
  STRATA_IO_CHECK(e->stored, zip.source(), "storage record ", rec, " is compressed");
  const size_t esize = dtype_size(t.dtype);
  STRATA_IO_CHECK(e->size / esize >= static_cast<uint64_t>(t.storage_numel), zip.source(), "storage record ", rec,
                  " holds ", e->size, " bytes, fewer than its ", t.storage_numel, " elements");
  STRATA_IO_CHECK(crc_matches(zip.data(*e), e->size, e->crc), zip.source(), "storage record ", rec,
                  " fails its CRC-32 (corrupt)");
  int64_t numel = 1, last = t.offset;  // the last element the view touches must lie in the storage
  for (size_t d = 0; d < t.size.size(); ++d) {
    numel *= t.size[d];
    if (t.size[d] == 0) numel = 0;
    STRATA_IO_CHECK(t.size[d] <= t.storage_numel + 1, zip.source(), "a tensor of ", rec, " has a size beyond its storage");
    if (t.size[d] > 0) last += (t.size[d] - 1) * t.stride[d];
  }
  STRATA_IO_CHECK(numel == 0 || last < t.storage_numel, zip.source(), "a tensor view reaches element ", last,
                  " of storage ", rec, ", which holds ", t.storage_numel);
  Tensor out = Tensor::empty(Shape(t.size), t.dtype);
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const uint8_t* src = zip.data(*e);
  bool row_major = true;  // the common case: one copy
  for (int64_t d = static_cast<int64_t>(t.size.size()) - 1, want = 1; d >= 0; --d) {
    if (t.size[d] != 1 && t.stride[d] != want) row_major = false;
    want *= t.size[d];
  }
  if (row_major) {
    if (numel > 0) std::memcpy(dst, src + t.offset * esize, numel * esize);
    return out;
  }
  std::vector<int64_t> idx(t.size.size(), 0);
  for (int64_t i = 0; i < numel; ++i) {
    int64_t s = t.offset;
    for (size_t d = 0; d < idx.size(); ++d) s += idx[d] * t.stride[d];
    std::memcpy(dst + i * esize, src + s * esize, esize);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.size[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace strata::formats
