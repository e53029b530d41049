// torch.save archives (see torch_archive_writer.h).
// Reference: pytorch caffe2/serialize/inline_container.cc (PyTorchStreamWriter), miniz.c
// (mz_zip_writer_add_mem_ex_v2, mz_zip_writer_finalize_archive), torch/serialization.py (_save).
#include "core/formats/torch_archive_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/formats/crc32.h"
#include "core/formats/mapped_file.h"
#include "core/formats/pickle_object_writer.h"

namespace strata::formats {

namespace {
constexpr uint64_t kFieldAlignment = 64;  // inline_container.h kFieldAlignment
constexpr size_t kLocalHeaderSize = 30, kCentralHeaderSize = 46;

void le(std::string& out, uint64_t x, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((x >> (8 * i)) & 0xFF));
}
uint64_t clamp32(uint64_t x, uint64_t threshold) { return x >= threshold ? 0xFFFFFFFFull : x; }
}  // namespace

TorchZipWriter::TorchZipWriter(ByteSink sink, std::string archive_name, uint64_t zip64_threshold)
    : sink_(std::move(sink)), archive_name_(std::move(archive_name)), threshold_(zip64_threshold) {
  STRATA_CHECK(!archive_name_.empty(), "TorchZipWriter: the archive name is empty");
}

void TorchZipWriter::emit(const void* data, size_t n) {
  if (n == 0) return;
  sink_(data, n);
  pos_ += n;
}
void TorchZipWriter::emit(const std::string& bytes) { emit(bytes.data(), bytes.size()); }

// miniz's mz_zip_writer_create_zip64_extra_data: id 1, then the uncompressed and compressed sizes
// (when the size needs 64 bits) and the local header offset (when it needs 64 bits).
std::string TorchZipWriter::zip64_extra(const Entry& e) const {
  const bool big_size = e.size >= threshold_, big_offset = e.offset >= threshold_;
  if (!big_size && !big_offset) return {};
  std::string body;
  if (big_size) {
    le(body, e.size, 8);
    le(body, e.size, 8);
  }
  if (big_offset) le(body, e.offset, 8);
  std::string out;
  le(out, 0x0001, 2);
  le(out, body.size(), 2);
  return out + body;
}

void TorchZipWriter::write_record(const std::string& name, const void* data, size_t n) {
  STRATA_INTERNAL_ASSERT(!finished_, "TorchZipWriter: write_record after finish");
  Entry e{archive_name_ + "/" + name, pos_, n, crc32(data, n)};
  STRATA_CHECK(e.name.size() < 0xFFFF, "TorchZipWriter: record name of ", e.name.size(), " bytes");
  const std::string z64 = zip64_extra(e);
  // getPadding: the data starts after the local header, the name, the zip64 field and the 4-byte
  // header of the "FB" field; pad that to kFieldAlignment.
  const uint64_t start = pos_ + kLocalHeaderSize + e.name.size() + z64.size() + 4;
  const uint64_t padding = (kFieldAlignment - start % kFieldAlignment) % kFieldAlignment;
  std::string header;
  le(header, 0x04034b50, 4);
  le(header, 0, 2);       // version needed (miniz: 0 for stored)
  le(header, 0x0808, 2);  // data descriptor follows; UTF-8 name
  le(header, 0, 2);       // stored
  le(header, 0, 4);       // DOS time and date
  le(header, 0, 4);       // CRC-32: in the data descriptor
  le(header, 0, 8);       // sizes: in the data descriptor
  le(header, e.name.size(), 2);
  le(header, z64.size() + 4 + padding, 2);
  header += e.name;
  header += z64;
  header += "FB";
  le(header, padding, 2);
  header.append(padding, 'Z');
  emit(header);
  emit(data, n);
  std::string descriptor;
  le(descriptor, 0x08074b50, 4);
  le(descriptor, e.crc, 4);
  le(descriptor, e.size, z64.empty() ? 4 : 8);  // compressed size
  le(descriptor, e.size, z64.empty() ? 4 : 8);  // uncompressed size
  emit(descriptor);
  crcs_.push_back(e.crc);
  entries_.push_back(std::move(e));
}

void TorchZipWriter::finish() {
  STRATA_INTERNAL_ASSERT(!finished_, "TorchZipWriter: finish twice");
  finished_ = true;
  const uint64_t cd_offset = pos_;
  for (const Entry& e : entries_) {
    const std::string z64 = zip64_extra(e);
    std::string h;
    le(h, 0x02014b50, 4);
    le(h, 0, 2);  // version made by
    le(h, 0, 2);  // version needed
    le(h, 0x0808, 2);
    le(h, 0, 2);  // stored
    le(h, 0, 4);  // DOS time and date
    le(h, e.crc, 4);
    le(h, clamp32(e.size, threshold_), 4);
    le(h, clamp32(e.size, threshold_), 4);
    le(h, e.name.size(), 2);
    le(h, z64.size(), 2);
    le(h, 0, 2);  // comment
    le(h, 0, 2);  // disk
    le(h, 0, 2);  // internal attributes
    le(h, 0, 4);  // external attributes
    le(h, clamp32(e.offset, threshold_), 4);
    h += e.name;
    h += z64;
    emit(h);
  }
  const uint64_t cd_size = pos_ - cd_offset, zip64_end_offset = pos_;
  const uint64_t count = entries_.size();
  std::string end;
  le(end, 0x06064b50, 4);  // zip64 end of central directory record
  le(end, 44, 8);
  le(end, 0x031e, 2);  // made by: Unix, 3.0
  le(end, 0x002d, 2);  // needed: 4.5
  le(end, 0, 4);
  le(end, 0, 4);
  le(end, count, 8);
  le(end, count, 8);
  le(end, cd_size, 8);
  le(end, cd_offset, 8);
  le(end, 0x07064b50, 4);  // zip64 end of central directory locator
  le(end, 0, 4);
  le(end, zip64_end_offset, 8);
  le(end, 1, 4);
  le(end, 0x06054b50, 4);  // end of central directory record
  le(end, 0, 2);
  le(end, 0, 2);
  le(end, count >= 0xFFFF ? 0xFFFF : count, 2);
  le(end, count >= 0xFFFF ? 0xFFFF : count, 2);
  le(end, clamp32(cd_size, threshold_), 4);
  le(end, clamp32(cd_offset, threshold_), 4);
  le(end, 0, 2);
  emit(end);
}

namespace {
void collect_tensors(const PyValue& v, std::vector<const PyTensorRef*>& out, int depth) {
  STRATA_CHECK(depth <= 1000, "torch_save: values nested deeper than 1000");
  if (v.kind == PyValue::Kind::Tensor) out.push_back(&v.tensor);
  for (const PyRef& item : v.items)
    if (item) collect_tensors(*item, out, depth + 1);
  for (const auto& [k, item] : v.dict) {
    if (k) collect_tensors(*k, out, depth + 1);
    if (item) collect_tensors(*item, out, depth + 1);
  }
  if (v.state) collect_tensors(*v.state, out, depth + 1);
}

// Every reference names a storage of its dtype and numel, and its elements lie inside it.
void check_storages(const PyValue& root, const std::map<std::string, Tensor>& storages) {
  std::vector<const PyTensorRef*> refs;
  collect_tensors(root, refs, 0);
  std::set<std::string> used;
  for (const PyTensorRef* t : refs) {
    auto it = storages.find(t->storage_key);
    STRATA_CHECK(it != storages.end(), "torch_save: a tensor references storage '", t->storage_key,
                 "', which is not among the storages given");
    const Tensor& s = it->second;
    STRATA_CHECK(s.dtype() == t->dtype && s.numel() == t->storage_numel, "torch_save: storage '",
                 t->storage_key, "' is ", dtype_name(s.dtype()), " of ", s.numel(),
                 " elements, but a tensor references it as ", dtype_name(t->dtype), " of ",
                 t->storage_numel);
    int64_t last = t->offset;
    bool empty = false;
    for (size_t d = 0; d < t->size.size(); ++d) {
      empty = empty || t->size[d] == 0;
      if (d < t->stride.size()) last += (t->size[d] - 1) * t->stride[d];
    }
    STRATA_CHECK(t->offset >= 0 && (empty || last < t->storage_numel), "torch_save: a tensor of storage '",
                 t->storage_key, "' reaches element ", last, " of ", t->storage_numel);
    used.insert(t->storage_key);
  }
  for (const auto& [key, s] : storages) {
    STRATA_CHECK(used.count(key), "torch_save: storage '", key, "' is not referenced by any tensor");
    STRATA_CHECK(s.defined() && s.device().is_cpu() && s.is_contiguous(), "torch_save: storage '", key,
                 "' must be a contiguous CPU tensor");
  }
}

// 20 digits of a hash of the record names, then 20 of their CRCs (the shape of torch's id).
std::string derived_serialization_id(const std::vector<std::string>& names, const std::vector<uint32_t>& crcs) {
  auto combine = [](uint64_t seed, uint64_t v) { return seed ^ (v + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2)); };
  uint64_t name_hash = 0, crc_hash = 0;
  for (const std::string& n : names) name_hash = combine(name_hash, crc32(n.data(), n.size()));
  for (uint32_t c : crcs) crc_hash = combine(crc_hash, c);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%020llu%020llu", static_cast<unsigned long long>(name_hash),
                static_cast<unsigned long long>(crc_hash));
  return buf;
}
}  // namespace

void torch_save_to(const ByteSink& sink, const PyValue& root, const std::map<std::string, Tensor>& storages,
                   const TorchSaveOptions& options) {
  check_storages(root, storages);
  const std::string pickle = pickle_object_dumps(root, 2);
  TorchZipWriter zip(sink, options.archive_name.empty() ? "archive" : options.archive_name,
                     options.zip64_threshold);
  std::vector<std::string> names;
  auto record = [&](const std::string& name, const void* data, size_t n) {
    zip.write_record(name, data, n);
    names.push_back(name);
  };
  auto text = [&](const std::string& name, const std::string& s) { record(name, s.data(), s.size()); };
  text("data.pkl", pickle);
  text(".format_version", "1");
  text(".storage_alignment", std::to_string(kFieldAlignment));
  text("byteorder", "little");
  for (const auto& [key, s] : storages) record("data/" + key, s.data_ptr(), s.nbytes());  // sorted keys
  text("version", "3\n");
  text(".data/serialization_id", options.serialization_id.empty()
                                     ? derived_serialization_id(names, zip.record_crcs())
                                     : options.serialization_id);
  zip.finish();
}

std::string torch_save_bytes(const PyValue& root, const std::map<std::string, Tensor>& storages,
                             const TorchSaveOptions& options) {
  std::string out;
  torch_save_to([&](const void* d, size_t n) { out.append(static_cast<const char*>(d), n); }, root, storages,
                options);
  return out;
}

void torch_save_file(const std::string& path, const PyValue& root, const std::map<std::string, Tensor>& storages,
                     const TorchSaveOptions& options) {
  TorchSaveOptions opts = options;
  if (opts.archive_name.empty()) opts.archive_name = std::filesystem::path(path).stem().string();
  if (opts.archive_name.empty()) opts.archive_name = "archive";
  AtomicFileWriter file(path);
  torch_save_to([&](const void* d, size_t n) { file.write(d, n); }, root, storages, opts);
  file.commit();
}

PyRef py_tensor_of(const std::string& key, const Tensor& tensor) {
  PyTensorRef ref;
  ref.storage_key = key;
  ref.dtype = tensor.dtype();
  ref.storage_numel = tensor.numel();
  ref.offset = 0;
  ref.size = tensor.shape().vec();
  ref.stride.assign(ref.size.size(), 1);
  for (int d = static_cast<int>(ref.size.size()) - 2; d >= 0; --d)
    ref.stride[d] = ref.stride[d + 1] * std::max<int64_t>(ref.size[d + 1], 1);  // torch: empty dims count as 1
  return PyValue::of_tensor(std::move(ref));
}

void torch_save_tensor_to(const ByteSink& sink, const Tensor& tensor, const TorchSaveOptions& options) {
  torch_save_to(sink, *py_tensor_of("0", tensor), {{"0", tensor}}, options);
}

std::string torch_save_tensor_bytes(const Tensor& tensor, const TorchSaveOptions& options) {
  return torch_save_bytes(*py_tensor_of("0", tensor), {{"0", tensor}}, options);
}

}  // namespace strata::formats
