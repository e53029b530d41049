#!/usr/bin/env bash
# Regenerates docs/config.md from the config table (training/config/config.cpp and the section files)
# and docs/megatron_flags.md from Megatron's argument list and the flag table, by running their unit
# tests in write mode; the same tests fail whenever a file and its source differ.
#   scripts/gen_config_doc.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
cmake --build "$build" --target strata_unit_tests
STRATA_WRITE_CONFIG_DOC=1 "$build/tests/strata_unit_tests" "config: docs/config.md is the generated reference"
STRATA_WRITE_CONFIG_DOC=1 "$build/tests/strata_unit_tests" "megatron flags: docs/megatron_flags.md is generated from the list and the table"
