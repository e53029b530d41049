#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test (unit tests, op sweep, multi-rank and
# functional golden-value tests); GPU tests report as skipped where no GPU is usable. Then the
# determinism tests and the golden cases again as a foreign CPU: another OpenBLAS kernel set and
# another ISA path than this machine's (docs/reproducibility.md).
# Last, every fuzz harness for a few seconds (scripts/fuzz.sh --all; FUZZ_SECONDS, default 10).
#   scripts/test.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$build"
cd "$build"
# ctest runs tests in parallel; one OpenMP thread per test process avoids oversubscribing the
# cores (spinning OpenMP workers of parallel tests slow each other down tenfold). Tests that
# check thread-count independence set their own thread counts (and wait passively, CMake).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
jobs="${TEST_JOBS:-$(nproc)}"
ctest --output-on-failure -j "$jobs" -LE '^determinism$'

# The foreign configuration: an OpenBLAS core type and an ISA path that differ from this run's.
host="$(./strata bench ops --no-bench --quick | sed -n 's/^cpu numerics: //p')"
host_core="$(sed -n 's/.*blas_core=\([^ ]*\).*/\1/p' <<<"$host")"
foreign_core=Sandybridge
if [[ "${host_core,,}" == sandybridge ]]; then foreign_core=Haswell; fi
foreign_isa=baseline  # on a CPU without AVX2 the host is baseline too: then only the BLAS kernel differs
echo "test.sh: this machine: $host"
echo "test.sh: again as a foreign CPU: OPENBLAS_CORETYPE=$foreign_core STRATA_CPU_ISA=$foreign_isa"
OPENBLAS_CORETYPE="$foreign_core" STRATA_CPU_ISA="$foreign_isa" \
  ctest --output-on-failure -j "$jobs" -L 'functional|^determinism$'

# Every fuzz harness for a short fixed budget, from its committed corpus (docs/fuzzing.md): the
# clang build (libFuzzer, ASan, UBSan) in its own directory beside this one.
start=$(date +%s)
STRATA_FUZZ_BUILD="${STRATA_FUZZ_BUILD:-$build-fuzz}" bash "$root/scripts/fuzz.sh" --all --seconds "${FUZZ_SECONDS:-10}"
echo "test.sh: the fuzz step (build and $(bash "$root/scripts/fuzz.sh" --list | wc -l) harnesses) took $(( $(date +%s) - start )) s"
