// A parameter-only checkpoint round trip for the model tests: save one model's parameters with the
// default tensor file format (training/checkpointing/checkpoint.h, as the trainer writes them), load them into
// another model's parameters (no optimizer state, no RNG), in a fresh temporary directory that is
// removed afterwards. Used by the MTP, hybrid-MTP and mHC tests to show the new parameters persist.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/parameter.h"
#include "training/checkpointing/checkpoint.h"

namespace strata::test {

inline void checkpoint_round_trip(const std::vector<Parameter*>& from, const std::vector<Parameter*>& to,
                                  const std::string& tag, int64_t iteration = 3) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata_" + tag + "_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::unique_ptr<TensorFileIO> io = make_default_tensor_file_io();
  CheckpointState st;
  st.iteration = iteration;
  save_checkpoint(dir.string(), st, from, nullptr, *io);
  CheckpointLoadOptions lo;
  lo.load_optimizer = false;
  lo.load_rng = false;
  load_checkpoint(dir.string(), to, nullptr, *io, lo);
  fs::remove_all(dir);
}

}  // namespace strata::test
