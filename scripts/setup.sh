#!/usr/bin/env bash
# Installs every Debian package the build and tests need (idempotent, safe to re-run).
# The CUDA toolkit, cuBLAS, cuDNN and NCCL are expected under /usr/local/cuda when present;
# without them the build is CPU-only. Python packages Debian lacks (the `tokenizers` reference of
# the tokenizer tests) go into .pyenv/, a virtual environment over Debian's /usr/bin/python3.
#   scripts/setup.sh           build + test dependencies
#   scripts/setup.sh --bench   also the Python reference stack (torch)
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libopenmpi-dev openmpi-bin
  libcli11-dev libspdlog-dev libfmt-dev libyaml-cpp-dev catch2 nlohmann-json3-dev
  libopenblas-dev
  libpcre2-dev libutf8proc-dev  # the tokenizer.json pre-tokenizer regexes and Unicode normalizers
  libsentencepiece-dev          # SentencePiece tokenizer models
  python3-sentencepiece python3-venv  # the tokenizer tests' references (tokenizers comes from pip)
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
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pyenv="$root/.pyenv"
pip_packages=(tokenizers==0.23.3)
if ! "$pyenv/bin/python" -c "import tokenizers, sentencepiece, numpy" 2>/dev/null; then
  echo "setup: creating $pyenv with ${pip_packages[*]}"
  /usr/bin/python3 -m venv --system-site-packages "$pyenv"
  "$pyenv/bin/python" -m pip install -q --disable-pip-version-check "${pip_packages[@]}"
fi
