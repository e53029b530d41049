// PyTorch distributed checkpoint directories (see dcp_reader.h).
// Reference: torch/distributed/checkpoint/metadata.py (TensorProperties.__getstate__: a tuple
// (dtype, layout, requires_grad, memory format, pin_memory)), filesystem.py (_StorageInfo).
#include "core/formats/dcp_reader.h"

#include <filesystem>

#include "core/formats/pickle_reader.h"
#include "core/formats/torch_archive.h"

namespace strata::formats {

namespace fs = std::filesystem;
using K = PyValue::Kind;

namespace {

bool torch_dtype(const PyValue& g, DType& out) {
  if (g.kind != K::Global || g.global.module != "torch") return false;
  static const std::pair<const char*, DType> table[] = {
      {"float32", DType::F32}, {"bfloat16", DType::BF16}, {"float16", DType::F16}, {"float64", DType::F64},
      {"int64", DType::I64},   {"int32", DType::I32},     {"uint8", DType::U8},    {"bool", DType::Bool}};
  for (const auto& [n, d] : table)
    if (g.global.name == n) {
      out = d;
      return true;
    }
  return false;
}

// A tuple (or torch.Size) of non-negative ints.
bool int_tuple(const PyValue* v, std::vector<int64_t>& out) {
  if (!v || !v->is_sequence()) return false;
  out.clear();
  for (const PyRef& i : v->items) {
    if (!i->is_int() || i->integer < 0) return false;
    out.push_back(i->integer);
  }
  return true;
}

}  // namespace

DcpReader::DcpReader(std::string dir) : dir_(std::move(dir)) {
  const std::string meta_path = (fs::path(dir_) / ".metadata").string();
  STRATA_IO_CHECK(fs::exists(meta_path), meta_path, "missing: not a PyTorch distributed checkpoint");
  MappedFile mf(meta_path);
  PyRef root = unpickle_restricted(mf.data(), mf.size(), meta_path);
  auto bad = [&](const std::string& what) { STRATA_IO_THROW(meta_path, "is not DCP metadata: ", what); };
  if (!root->is_instance_of("torch.distributed.checkpoint.metadata", "Metadata")) bad("the pickle holds a " + std::string(root->kind_name()));
  const PyValue* sdm = root->attr("state_dict_metadata");
  const PyValue* storage = root->attr("storage_data");
  if (!sdm || sdm->kind != K::Dict) bad("no state_dict_metadata");
  if (!storage || storage->kind != K::Dict) bad("no storage_data");
  for (const auto& [k, v] : sdm->dict) {
    if (!k->is_str()) bad("a key that is not a str");
    DcpItem item;
    if (v->is_instance_of("torch.distributed.checkpoint.metadata", "BytesStorageMetadata")) {
      item.is_tensor = false;
    } else if (v->is_instance_of("torch.distributed.checkpoint.metadata", "TensorStorageMetadata")) {
      const PyValue* props = v->attr("properties");
      const PyValue* dtype = nullptr;
      if (props && props->state && props->state->kind == K::Tuple && !props->state->items.empty())
        dtype = props->state->items[0].get();
      else if (props)
        dtype = props->attr("dtype");
      if (!dtype || !torch_dtype(*dtype, item.dtype)) bad(k->text + ": a dtype this reader does not know");
      if (!int_tuple(v->attr("size"), item.shape)) bad(k->text + ": no size");
      const PyValue* chunks = v->attr("chunks");
      if (!chunks || !chunks->is_sequence()) bad(k->text + ": no chunks");
      for (const PyRef& c : chunks->items) {
        DcpChunk ch;
        if (!int_tuple(c->attr("offsets"), ch.offsets) || !int_tuple(c->attr("sizes"), ch.sizes) ||
            ch.offsets.size() != item.shape.size() || ch.sizes.size() != item.shape.size())
          bad(k->text + ": a malformed chunk");
        for (size_t d = 0; d < ch.sizes.size(); ++d)
          if (ch.offsets[d] > item.shape[d] || ch.sizes[d] > item.shape[d] - ch.offsets[d])
            bad(k->text + ": a chunk outside the tensor");
        item.chunks.push_back(std::move(ch));
      }
    } else {
      bad(k->text + ": a " + std::string(v->kind_name()) + " entry");
    }
    items_[k->text] = std::move(item);
  }
  // Where each chunk lies: MetadataIndex(fqn, offset, index) → _StorageInfo(relative_path, offset, length).
  for (const auto& [k, v] : storage->dict) {
    const PyValue* fqn = k->attr("fqn");
    const PyValue* path = v->attr("relative_path");
    const PyValue* off = v->attr("offset");
    const PyValue* len = v->attr("length");
    if (!fqn || !fqn->is_str() || !path || !path->is_str() || !off || !off->is_int() || !len || !len->is_int() ||
        off->integer < 0 || len->integer < 0)
      bad("a malformed storage_data entry");
    auto it = items_.find(fqn->text);
    if (it == items_.end()) bad("storage for an unlisted item " + fqn->text);
    DcpItem& item = it->second;
    DcpChunk* target = nullptr;
    if (!item.is_tensor) {
      if (item.chunks.empty()) item.chunks.emplace_back();
      target = &item.chunks[0];
    } else {
      std::vector<int64_t> offsets;
      if (!int_tuple(k->attr("offset"), offsets)) bad(fqn->text + ": a storage entry without chunk offsets");
      for (DcpChunk& c : item.chunks)
        if (c.offsets == offsets) target = &c;
      if (!target) bad(fqn->text + ": storage for a chunk the metadata does not list");
    }
    // DCP names files beside .metadata ("__0_0.distcp"): a path that could leave the directory is refused.
    if (path->text.empty() || path->text.find('/') != std::string::npos || path->text == "." || path->text == "..")
      bad("storage file name '" + path->text + "' is not a file of the checkpoint's directory");
    target->file = path->text;
    target->offset = static_cast<uint64_t>(off->integer);
    target->length = static_cast<uint64_t>(len->integer);
  }
  for (const auto& [name, item] : items_)
    for (const DcpChunk& c : item.chunks)
      if (c.file.empty()) STRATA_IO_THROW(meta_path, "item ", name, " has a chunk stored nowhere");
}

const DcpItem* DcpReader::find(const std::string& fqn) const {
  auto it = items_.find(fqn);
  return it == items_.end() ? nullptr : &it->second;
}

const MappedFile& DcpReader::file(const std::string& rel) {
  auto it = files_.find(rel);
  if (it != files_.end()) return *it->second;
  const fs::path p = fs::path(dir_) / rel;
  STRATA_IO_CHECK(fs::exists(p), p.string(), "missing (the checkpoint's .metadata stores items in it)");
  return *files_.emplace(rel, std::make_unique<MappedFile>(p.string())).first->second;
}

Tensor DcpReader::read_chunk(const std::string& fqn, size_t i) {
  const DcpItem* item = find(fqn);
  STRATA_IO_CHECK(item && item->is_tensor && i < item->chunks.size(), dir_, "has no tensor chunk ", fqn, "[", i, "]");
  const DcpChunk& c = item->chunks[i];
  const MappedFile& f = file(c.file);
  const std::string where = (fs::path(dir_) / c.file).string();
  STRATA_IO_CHECK(c.offset <= f.size() && c.length <= f.size() - c.offset, where, "item ", fqn, " lies at bytes ",
                  c.offset, "+", c.length, ", past the end of the file (", f.size(), " bytes: truncated?)");
  TorchArchive a(f.data() + c.offset, c.length, where + "[" + fqn + "]");
  STRATA_IO_CHECK(a.root->kind == K::Tensor, where, "item ", fqn, " holds a ", a.root->kind_name(), ", not a tensor");
  Tensor t = a.tensor(a.root->tensor);
  STRATA_IO_CHECK(t.dtype() == item->dtype && t.shape() == Shape(c.sizes), where, "item ", fqn, " holds a ",
                  dtype_name(t.dtype()), " tensor of shape ", t.shape().str(), "; the metadata says ",
                  dtype_name(item->dtype), " ", Shape(c.sizes).str());
  return t;
}

std::string DcpReader::read_bytes(const std::string& fqn) {
  const DcpItem* item = find(fqn);
  STRATA_IO_CHECK(item && !item->is_tensor && !item->chunks.empty(), dir_, "has no bytes item ", fqn);
  const DcpChunk& c = item->chunks[0];
  const MappedFile& f = file(c.file);
  STRATA_IO_CHECK(c.offset <= f.size() && c.length <= f.size() - c.offset, (fs::path(dir_) / c.file).string(),
                  "item ", fqn, " lies past the end of the file (truncated?)");
  return std::string(reinterpret_cast<const char*>(f.data() + c.offset), c.length);
}

}  // namespace strata::formats
