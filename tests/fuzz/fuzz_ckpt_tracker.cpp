// Fuzz harness: the checkpoint tracker file latest_checkpointed_iteration.txt
// (training/checkpointing/checkpoint.h, read_checkpoint_tracker): the input is written as the
// tracker of a scratch directory and read; the contract of tests/fuzz/fuzz_contract.h (errors name
// the file).
// Reference: megatron/training/checkpointing.py (read_metadata), https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_contract.h"
#include "training/checkpointing/checkpoint.h"

STRATA_FUZZ_TARGET(ckpt_tracker) {
  const auto& dir = strata::fuzz::scratch_dir();
  strata::fuzz::write_input(dir / "latest_checkpointed_iteration.txt", data, size);
  strata::fuzz::check_contract([&] { strata::read_checkpoint_tracker(dir.string()); },
                               "latest_checkpointed_iteration.txt");
}
