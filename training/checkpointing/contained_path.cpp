// Entries of manifests and indexes resolved inside their directory (contained_path.h).
#include "training/checkpointing/contained_path.h"

#include <system_error>

#include "core/error.h"

namespace strata {

namespace fs = std::filesystem;

std::filesystem::path contained_path(const fs::path& dir, const std::string& entry, const std::string& listing,
                                     const std::string& what) {
  const std::string says = listing + ": " + what + " names '" + entry + "', ";
  STRATA_CHECK(!entry.empty(), listing, ": ", what, " names no file");
  const fs::path rel(entry);
  STRATA_CHECK(!rel.is_absolute() && !rel.has_root_name() && !rel.has_root_directory(), says,
               "an absolute path; only files inside ", dir.string(), " are read");
  for (const fs::path& part : rel)
    STRATA_CHECK(part != "..", says, "which climbs out with '..'; only files inside ", dir.string(), " are read");
  // Symlinks (of the entry or of a folder on its way) must not lead out either.
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(dir, ec);
  STRATA_CHECK(!ec, listing, ": cannot resolve ", dir.string(), ": ", ec.message());
  const fs::path full = dir / rel;
  const fs::path real = fs::weakly_canonical(full, ec);
  STRATA_CHECK(!ec, listing, ": cannot resolve ", full.string(), ": ", ec.message());
  const fs::path inside = real.lexically_relative(root);
  STRATA_CHECK(!inside.empty() && *inside.begin() != ".." && inside != ".", says, "which resolves to ",
               real.string(), " (through a symlink), outside ", dir.string(), "; only files inside it are read");
  return full;
}

}  // namespace strata
