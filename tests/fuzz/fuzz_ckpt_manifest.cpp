// Fuzz harness: a Strata checkpoint's manifest.json (training/checkpointing/checkpoint.h,
// CheckpointTensorReader; checkpoint_architecture.h read_checkpoint_config; checkpoint_scheduler.h
// read_checkpoint_lr_schedule): the input is written as <scratch>/iter_0000001/manifest.json, read,
// its run state and tensor table taken, and every tensor it lists read (the shard files are absent,
// so a read that gets that far fails naming its file). The contract of tests/fuzz/fuzz_contract.h.
// Reference: docs/checkpointing.md (the manifest), https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "tests/fuzz/fuzz_contract.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_architecture.h"
#include "training/checkpointing/checkpoint_scheduler.h"
#include "training/checkpointing/tensor_file.h"

STRATA_FUZZ_TARGET(ckpt_manifest) {
  strata::fuzz::quiet_logs();
  static const std::unique_ptr<strata::TensorFileIO> io = strata::make_default_tensor_file_io();
  const std::filesystem::path load_dir = strata::fuzz::scratch_dir() / "ckpt";
  const std::filesystem::path iter_dir = load_dir / "iter_0000001";
  std::filesystem::create_directories(iter_dir);
  strata::fuzz::write_input(iter_dir / "manifest.json", data, size);
  strata::fuzz::check_contract([&] {
    strata::CheckpointTensorReader reader(iter_dir.string(), *io);
    (void)reader.state();
    int reads = 0;
    for (const auto& [name, shape] : reader.tensors()) {
      if (++reads > 8) break;
      try {
        (void)reader.read(name);
      } catch (const strata::Error&) {
      }
    }
  });
  strata::fuzz::check_contract([&] { (void)strata::read_checkpoint_config(load_dir.string(), 1); });
  strata::fuzz::check_contract([&] { (void)strata::read_checkpoint_lr_schedule(load_dir.string(), 1); });
}
