// A file that a manifest or an index names, resolved inside the directory that holds it: a
// checkpoint manifest's shard files (training/checkpointing/checkpoint.cpp) and the shards of a
// Hugging Face model.safetensors.index.json "weight_map" (training/hf/hf_export.cpp). An entry that
// is empty, absolute, has a ".." component, or resolves (through symlinks) outside the directory is
// refused, so a crafted file cannot make a reader open and parse files elsewhere.
// Reference: Python's os.path.commonpath idiom for "is this path under that directory" after
// os.path.realpath (which is what fs::weakly_canonical computes here).
#pragma once
#include <filesystem>
#include <string>

namespace strata {

// dir / entry, checked: throws (naming `listing`, the file that names the entry, and `what`, the
// entry as the user would look it up, e.g. "weight_map entry 'lm_head.weight'") when the entry
// leaves dir. Does not check that the file exists.
std::filesystem::path contained_path(const std::filesystem::path& dir, const std::string& entry,
                                     const std::string& listing, const std::string& what);

}  // namespace strata
