#!/usr/bin/env bash
# Installs every Debian package the build and tests need (idempotent, safe to re-run).
# The CUDA toolkit, cuBLAS, cuDNN and NCCL are expected under /usr/local/cuda when present;
# without them the build is CPU-only. Python packages Debian lacks go into .pyenv/, a virtual
# environment over Debian's /usr/bin/python3: `tokenizers` (the tokenizer tests' reference) and
# `transformers` + `safetensors` (the HF import/export tests write config.json with transformers'
# own config classes and load the exports back with them; no torch).
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
  clang libclang-rt-dev  # the fuzz harnesses (libFuzzer, ASan, UBSan: scripts/fuzz.sh, docs/fuzzing.md)
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
# transformers: the newest 5.x for Python 3.11; docs/formats.md names it as the version exports are
# written for (tests/hf/hf_transformers_config.py checks that it loads them).
# tiktoken: the reference for Megatron's TikTokenizer (tests/tokenizer/make_tiktoken_reference.py).
# atheris: libFuzzer for Python, the router-trace harness (tests/fuzz/fuzz_router_trace.py).
pip_packages=(tokenizers==0.23.3 transformers==5.25.0 safetensors==0.8.0 tiktoken==0.12.0 atheris==3.0.0)
have="$("$pyenv/bin/python" -c "import tokenizers, sentencepiece, numpy, safetensors, transformers, tiktoken, atheris
from importlib.metadata import version
print(tokenizers.__version__, transformers.__version__, safetensors.__version__, tiktoken.__version__,
      version('atheris'))" 2>/dev/null || true)"
if [[ "$have" != "0.23.3 5.25.0 0.8.0 0.12.0 3.0.0" ]]; then
  echo "setup: making $pyenv with ${pip_packages[*]}"
  [[ -x "$pyenv/bin/python" ]] || /usr/bin/python3 -m venv --system-site-packages "$pyenv"
  "$pyenv/bin/python" -m pip install -q --disable-pip-version-check "${pip_packages[@]}"
fi
