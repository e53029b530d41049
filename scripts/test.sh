#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test (unit tests, op sweep; later multi-rank
# and functional golden-value tests). GPU tests report as skipped where no GPU is usable.
#   scripts/test.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$build"
cd "$build"
# ctest runs tests in parallel; one OpenMP thread per test process avoids oversubscribing the
# cores (spinning OpenMP workers of parallel tests slow each other down tenfold). Tests that
# check thread-count independence set their own thread counts.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
ctest --output-on-failure -j "${TEST_JOBS:-$(nproc)}"
