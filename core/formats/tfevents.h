// TensorBoard event files (tfevents): a scalar writer and a scalar reader, no protobuf library.
// Reference: TensorFlow tensorflow/core/util/events_writer.cc (file name, first event
// file_version "brain.Event:2"), tensorflow/core/lib/io/record_writer.cc (TFRecord framing),
// tensorflow/core/util/event.proto + summary.proto (the fields encoded here). Megatron's
// golden-value tooling (get_test_results_from_tensorboard_logs.py) reads these scalars.
//
// Record: u64 length | u32 masked_crc32c(length bytes) | data[length] | u32 masked_crc32c(data),
// little-endian. Event{wall_time=1:double, step=2:int64, file_version=3:string,
// summary=5:Summary}; Summary{value=1:Value}; Value{tag=1:string, simple_value=2:float}.
// Fields equal to their proto3 default (0, "") are omitted, as protobuf does.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/mapped_file.h"

namespace strata::formats {

// The serialized Event bytes (no record framing) for one scalar and for the file header.
std::string encode_scalar_event(const std::string& tag, float value, int64_t step, double wall_time);
std::string encode_file_version_event(double wall_time, const std::string& version = "brain.Event:2");
// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
std::string frame_tfrecord(const std::string& data);

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and `dir/events.out.tfevents.<unix_ts>.<hostname>` (with a ".<n>"
  // suffix if that name is taken); its first record, file_version "brain.Event:2", is written
  // at once. The file is created atomically (.tmp + rename); later records are appended whole.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();  // flushes; errors are logged, not thrown
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Buffers one scalar event (value stored as float32, like TensorBoard's simple_value).
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  void add_scalar(const std::string& tag, double value, int64_t step);  // wall_time = now
  void flush();  // appends all buffered records to the file
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<AppendFile> file_;
  std::string buffer_;
};

struct ScalarEvent {
  std::string tag;
  int64_t step = 0;
  double value = 0;  // the stored float32, widened
  double wall_time = 0;
};

// Every scalar (simple_value) in the file, in file order. Verifies both CRCs of every record;
// a truncated or corrupt file throws strata::Error (kind Io) naming the file and the byte offset.
// Events without scalars (file_version, graphs, histograms) are skipped.
std::vector<ScalarEvent> read_tfevents_scalars(const std::string& path);

}  // namespace strata::formats
