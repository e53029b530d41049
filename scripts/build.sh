#!/usr/bin/env bash
# Configures and builds Strata with CMake + Ninja (+ ccache when present).
#   scripts/build.sh [BUILD_DIR [TARGET...]]   (default: build/, every target)
# Environment: STRATA_CUDA=AUTO|ON|OFF (default AUTO), CUDA_ARCHS (default 90), BUILD_TYPE.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
targets=("${@:2}")
cuda="${STRATA_CUDA:-AUTO}"
cmake -S "$root" -B "$build" -G Ninja \
  -DSTRATA_CUDA="$cuda" \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" > "$build.cmake.log" 2>&1 || {
    cat "$build.cmake.log"; exit 1; }
grep -E "Strata CUDA backend" "$build.cmake.log" || true
if ((${#targets[@]})); then
  cmake --build "$build" -j "${BUILD_JOBS:-$(nproc)}" --target "${targets[@]}"
else
  cmake --build "$build" -j "${BUILD_JOBS:-$(nproc)}"
fi
