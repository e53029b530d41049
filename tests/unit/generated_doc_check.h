// A generated document (docs/config.md, docs/megatron_flags.md) against the text its source
// produces: with STRATA_WRITE_CONFIG_DOC=1 the file is written first (scripts/gen_config_doc.sh);
// otherwise any difference fails, naming the file and the script that regenerates it.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "strata_source_dir.h"

namespace strata::test {

inline void check_generated_doc(const std::string& relative_path, const std::string& generated) {
  const std::filesystem::path doc = std::filesystem::path(STRATA_SOURCE_DIR) / relative_path;
  if (const char* w = std::getenv("STRATA_WRITE_CONFIG_DOC"); w && std::string(w) == "1") {
    std::ofstream(doc) << generated;
    WARN("wrote " << doc.string());
  }
  std::ifstream in(doc);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  INFO(relative_path << " differs from its source; run scripts/gen_config_doc.sh");
  CHECK(ss.str() == generated);
}

}  // namespace strata::test
