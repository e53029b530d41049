// Fuzz harness: the restricted unpickler (core/formats/pickle_reader.h, unpickle_restricted) on
// any bytes; the contract of tests/fuzz/fuzz_contract.h (errors name the source "fuzz.pkl").
// Reference: CPython Lib/pickle.py (the format), https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>

#include "core/formats/pickle_reader.h"
#include "tests/fuzz/fuzz_contract.h"

STRATA_FUZZ_TARGET(pickle) {
  strata::fuzz::check_contract([&] { strata::formats::unpickle_restricted(data, size, "fuzz.pkl"); }, "fuzz.pkl");
}
