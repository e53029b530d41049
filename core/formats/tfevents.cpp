// Implements core/formats/tfevents.h: hand-encoded protobuf subset + TFRecord framing.
// Reference: TensorFlow record_writer.cc / record_reader.cc, protobuf wire format
// (https://protobuf.dev/programming-guides/encoding/).
#include "core/formats/tfevents.h"

#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/formats/crc32c.h"
#include "core/logging.h"

namespace strata::formats {

namespace {
static_assert(std::endian::native == std::endian::little, "tfevents I/O assumes a little-endian host");

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
template <typename T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes_field(std::string& out, uint8_t key, const std::string& bytes) {
  out.push_back(static_cast<char>(key));
  put_varint(out, bytes.size());
  out += bytes;
}
void put_event_header(std::string& out, double wall_time, int64_t step) {
  if (wall_time != 0.0) {
    out.push_back(0x09);  // field 1, wire type 1 (64-bit)
    put_fixed(out, wall_time);
  }
  if (step != 0) {
    out.push_back(0x10);  // field 2, wire type 0 (varint); negative int64 takes 10 bytes
    put_varint(out, static_cast<uint64_t>(step));
  }
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// ---- reading ----
struct Cursor {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;
  bool done() const { return p >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) break;
      uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ok = false;
    return 0;
  }
  template <typename T>
  T fixed() {
    T v{};
    if (end - p < static_cast<ptrdiff_t>(sizeof(T))) {
      ok = false;
      p = end;
      return v;
    }
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  Cursor sub() {  // a length-delimited field
    uint64_t n = varint();
    if (!ok || n > static_cast<uint64_t>(end - p)) {
      ok = false;
      p = end;
      return Cursor{end, end, false};
    }
    Cursor c{p, p + n};
    p += n;
    return c;
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: varint(); break;
      case 1: fixed<uint64_t>(); break;
      case 2: sub(); break;
      case 5: fixed<uint32_t>(); break;
      default: ok = false; p = end;
    }
  }
};

struct ParsedValue {
  std::string tag;
  bool has_simple = false;
  float simple = 0;
};

bool parse_value(Cursor c, ParsedValue& v) {
  while (c.ok && !c.done()) {
    uint64_t key = c.varint();
    if (!c.ok) break;
    int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 2) {
      Cursor s = c.sub();
      v.tag.assign(reinterpret_cast<const char*>(s.p), s.end - s.p);
    } else if (field == 2 && wire == 5) {
      v.simple = c.fixed<float>();
      v.has_simple = true;
    } else {
      c.skip(wire);
    }
  }
  return c.ok;
}

bool parse_event(Cursor c, std::vector<ScalarEvent>& out) {
  double wall_time = 0;
  int64_t step = 0;
  std::vector<ParsedValue> values;
  while (c.ok && !c.done()) {
    uint64_t key = c.varint();
    if (!c.ok) break;
    int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 1) {
      wall_time = c.fixed<double>();
    } else if (field == 2 && wire == 0) {
      step = static_cast<int64_t>(c.varint());
    } else if (field == 5 && wire == 2) {
      Cursor summary = c.sub();
      while (c.ok && summary.ok && !summary.done()) {
        uint64_t skey = summary.varint();
        if (!summary.ok) break;
        if (skey == 0x0A) {
          ParsedValue v;
          if (!parse_value(summary.sub(), v)) return false;
          values.push_back(std::move(v));
        } else {
          summary.skip(static_cast<int>(skey & 7));
        }
      }
      if (!summary.ok) return false;
    } else {
      c.skip(wire);
    }
  }
  if (!c.ok) return false;
  for (auto& v : values)
    if (v.has_simple) out.push_back(ScalarEvent{std::move(v.tag), step, v.simple, wall_time});
  return true;
}
}  // namespace

std::string encode_scalar_event(const std::string& tag, float value, int64_t step, double wall_time) {
  std::string val;
  if (!tag.empty()) put_bytes_field(val, 0x0A, tag);  // Value.tag = 1
  val.push_back(0x15);                                // Value.simple_value = 2, fixed32
  put_fixed(val, value);
  std::string summary;
  put_bytes_field(summary, 0x0A, val);  // Summary.value = 1
  std::string event;
  put_event_header(event, wall_time, step);
  put_bytes_field(event, 0x2A, summary);  // Event.summary = 5
  return event;
}

std::string encode_file_version_event(double wall_time, const std::string& version) {
  std::string event;
  put_event_header(event, wall_time, 0);
  put_bytes_field(event, 0x1A, version);  // Event.file_version = 3
  return event;
}

std::string frame_tfrecord(const std::string& data) {
  std::string out;
  uint64_t len = data.size();
  put_fixed(out, len);
  put_fixed(out, crc32c_mask(crc32c(out.data(), 8)));
  out += data;
  put_fixed(out, crc32c_mask(crc32c(data.data(), data.size())));
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  STRATA_IO_CHECK(!ec, dir, "cannot create directory: ", ec.message());
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  double now = now_seconds();
  std::string base = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host;
  path_ = base;
  for (int n = 1; std::filesystem::exists(path_); ++n) path_ = base + "." + std::to_string(n);
  std::string first = frame_tfrecord(encode_file_version_event(now));
  write_file_atomic(path_, first.data(), first.size());
  file_ = std::make_unique<AppendFile>(path_, /*append=*/true);
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    flush();
  } catch (const std::exception& e) {
    strata::log::error("TensorBoardWriter {}: {}", path_, e.what());
  }
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  buffer_ += frame_tfrecord(encode_scalar_event(tag, static_cast<float>(value), step, wall_time));
  if (buffer_.size() > (1u << 20)) flush();
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalar(tag, value, step, now_seconds());
}

void TensorBoardWriter::flush() {
  if (buffer_.empty()) return;
  file_->append(buffer_.data(), buffer_.size());
  buffer_.clear();
}

std::vector<ScalarEvent> read_tfevents_scalars(const std::string& path) {
  MappedFile file(path);
  const uint8_t* base = file.data();
  const size_t size = file.size();
  std::vector<ScalarEvent> out;
  size_t pos = 0;
  while (pos < size) {
    STRATA_IO_CHECK(size - pos >= 12, path, "truncated record header at byte ", pos, " (", size - pos,
                    " bytes left, 12 needed)");
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, base + pos, 8);
    std::memcpy(&len_crc, base + pos + 8, 4);
    STRATA_IO_CHECK(crc32c_unmask(len_crc) == crc32c(base + pos, 8), path,
                    "length CRC mismatch in record at byte ", pos);
    STRATA_IO_CHECK(len <= size - pos - 12 && size - pos - 12 - len >= 4, path,
                    "truncated record at byte ", pos, ": length ", len, " but ", size - pos - 12,
                    " bytes left (data + 4-byte CRC needed)");
    const uint8_t* data = base + pos + 12;
    uint32_t data_crc;
    std::memcpy(&data_crc, data + len, 4);
    STRATA_IO_CHECK(crc32c_unmask(data_crc) == crc32c(data, len), path,
                    "data CRC mismatch in record at byte ", pos);
    STRATA_IO_CHECK(parse_event(Cursor{data, data + len}, out), path,
                    "malformed Event protobuf in record at byte ", pos);
    pos += 12 + len + 4;
  }
  return out;
}

}  // namespace strata::formats
