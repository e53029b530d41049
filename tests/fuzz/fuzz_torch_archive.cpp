// Fuzz harness: the torch.save reader (core/formats/torch_archive.h): the zip, its data.pkl, and
// every tensor the pickle refers to materialized (TorchArchive::tensor), as Megatron's legacy
// checkpoint reader does; the contract of tests/fuzz/fuzz_contract.h (errors name "fuzz.pt").
// Reference: torch/serialization.py (_load), https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "core/formats/torch_archive.h"
#include "tests/fuzz/fuzz_contract.h"

namespace {

using strata::formats::PyValue;

// Every tensor of the pickled value, each once (values may be shared; the reader refuses cycles).
std::vector<const PyValue*> tensors_of(const PyValue* root) {
  std::vector<const PyValue*> out, todo = {root};
  std::unordered_set<const PyValue*> seen;
  while (!todo.empty()) {
    const PyValue* v = todo.back();
    todo.pop_back();
    if (!v || !seen.insert(v).second) continue;
    if (v->kind == PyValue::Kind::Tensor) out.push_back(v);
    for (const auto& i : v->items) todo.push_back(i.get());
    for (const auto& [k, x] : v->dict) todo.push_back(k.get()), todo.push_back(x.get());
    todo.push_back(v->state.get());
  }
  return out;
}

}  // namespace

STRATA_FUZZ_TARGET(torch_archive) {
  strata::fuzz::check_contract(
      [&] {
        strata::formats::TorchArchive archive(data, size, "fuzz.pt");
        for (const PyValue* t : tensors_of(archive.root.get())) archive.tensor(t->tensor);
      },
      "fuzz.pt");
}
