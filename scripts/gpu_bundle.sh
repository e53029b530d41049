#!/usr/bin/env bash
# Builds the CUDA binaries here (sm_90) and packs them with the shared libraries they need that a
# bare CUDA image lacks (spdlog, fmt, yaml-cpp, OpenBLAS, OpenMPI …; not libc/libstdc++ nor the
# CUDA libraries, which the GPU machine has) into gpu_bundle/ (git-ignored), for
# `device run --carry gpu_bundle.tar.xz`. scripts/gpu_check.sh uses the bundle when it finds one.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-sm90}"
STRATA_CUDA=ON CUDA_ARCHS=90 bash "$root/scripts/build.sh" "$build"
out="$root/gpu_bundle"
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for b in strata strata_op_sweep tests/strata_unit_tests tests/strata_gpu_tests; do
  cp "$build/$b" "$out/bin/"
  strip --strip-debug "$out/bin/$(basename "$b")"
done
for b in "$out"/bin/*; do
  ldd "$b" | awk '/=>/ {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*|ld-linux*) ;;
      libcuda*|libcublas*|libcudnn*|libnccl*|libcudart*|libnvrtc*|libnvJitLink*) ;;
      *) cp -nL "$lib" "$out/lib/" ;;
    esac
  done
done
# The device tool carries at most 64 MiB: ship the bundle as one xz archive (about 32 MiB), which
# scripts/gpu_check.sh unpacks there.
tar -C "$root" -cf - gpu_bundle | xz -T0 -6 > "$root/gpu_bundle.tar.xz"
du -sh "$out" "$root/gpu_bundle.tar.xz"
