#!/usr/bin/env bash
# Regenerates docs/config.md from the config table (training/config/config.cpp and the section files) by
# running the [config] unit test in write mode; the same test fails whenever the two differ.
#   scripts/gen_config_doc.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
cmake --build "$build" --target strata_unit_tests
STRATA_WRITE_CONFIG_DOC=1 "$build/tests/strata_unit_tests" "config: docs/config.md is the generated reference"
