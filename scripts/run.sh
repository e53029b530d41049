#!/usr/bin/env bash
# The main job on a fresh machine: install, build, run. Until the trainer exists this is the
# device report, the op sweep against the CPU float64 reference, and the op benchmarks.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$build"
"$build/strata" bench ops --check --quick
