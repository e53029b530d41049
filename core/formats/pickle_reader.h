// A restricted unpickler: reads the pickles inside Megatron's checkpoints (torch.save's data.pkl,
// PyTorch distributed checkpoint .metadata, Megatron's common state) into PyValue data without
// running anything. A GLOBAL is accepted only from a whitelist of the types those files hold —
// tensors and storages, containers, argparse.Namespace, numpy's array pieces, the distributed
// checkpoint's metadata classes, enums of Megatron-Core — and anything else is refused, naming the
// type and the file. Every read is bounds-checked, every length is checked against the bytes left
// (so nothing is allocated beyond the input's size), and nesting is bounded.
// Reference: CPython Lib/pickle.py (_Unpickler, the opcodes of protocols 0-5), Lib/pickletools.py
// (opcode table), torch/serialization.py (_load: persistent_load of ('storage', type, key,
// location, numel)), torch/_weights_only_unpickler.py (PyTorch's own allow-list idea).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/formats/py_value.h"

namespace strata::formats {

// Whether `module.name` may appear in a pickle this reader accepts.
bool pickle_global_allowed(const std::string& module, const std::string& name);

// The value pickled in data[0, size). `source` names the input in errors ("iter_0000002/.metadata",
// "model_optim_rng.pt:archive/data.pkl"). Persistent ids (BINPERSID) become Instances of class
// "__persistent__.id" whose one argument is the id; torch's storage ids are resolved by
// _rebuild_tensor_v2 into Tensor values. Throws strata::Error (kind Io) naming `source` on a
// malformed or truncated pickle, a refused type, or nesting deeper than 100.
PyRef unpickle_restricted(const uint8_t* data, size_t size, const std::string& source);

}  // namespace strata::formats
