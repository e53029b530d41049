#!/usr/bin/env bash
# Installs every Debian package the build and tests need (idempotent, safe to re-run).
# The CUDA toolkit, cuBLAS, cuDNN and NCCL are expected under /usr/local/cuda when present;
# without them the build is CPU-only.
#   scripts/setup.sh           build + test dependencies
#   scripts/setup.sh --bench   also the Python reference stack (torch)
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libopenmpi-dev openmpi-bin
  libcli11-dev libspdlog-dev libfmt-dev libyaml-cpp-dev catch2 nlohmann-json3-dev
  libopenblas-dev
  python3-numpy  # tests/hf/hf_reference.py (the numpy transformers reference of the HF export tests)
  python3-matplotlib  # scripts/plot_metrics.py (the main job's loss.png, the plot_metrics test)
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
