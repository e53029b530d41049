#!/usr/bin/env bash
# Makes the Python 3.12 virtual environment that make_fixtures.py runs in: Megatron-Core 0.19.2
# (PyPI), a CPU-only torch wheel, numpy and the few packages Megatron-Core's training code imports.
# Idempotent: an existing venv with megatron-core 0.19.2 importable is left as it is.
# Only people regenerating tests/fixtures/megatron_ckpt need it; CI never does.
# Usage: bash scripts/megatron/checkpoint_fixtures/setup_venv.sh [VENV_DIR]   (default .mcore-venv)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
venv="${1:-$repo_root/.mcore-venv}"
python="${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python3.12}"
if [[ ! -x "$python" ]]; then python="$(command -v python3.12 || true)"; fi
if [[ -z "$python" ]]; then echo "setup_venv.sh: python3.12 not found (set PYTHON312)" >&2; exit 1; fi

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" - <<'PY' 2>/dev/null; then
import importlib.metadata as m, torch, numpy
assert m.version("megatron-core") == "0.19.2"
import megatron.training  # noqa: F401
PY
  echo "setup_venv.sh: $venv already has megatron-core 0.19.2"; exit 0
fi

[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
"${pip[@]}" --upgrade pip setuptools wheel
# The CPU-only wheel where its index is reachable; otherwise PyPI's torch (it brings CUDA runtime
# wheels along, unused here: the fixtures run on the CPU).
"${pip[@]}" --retries 0 --timeout 15 torch --index-url https://download.pytorch.org/whl/cpu \
  || "${pip[@]}" torch
# megatron-core's runtime imports (megatron.training pulls in a few more than the core).
"${pip[@]}" "megatron-core==0.19.2" numpy packaging pyyaml einops psutil
"$venv/bin/python" -c "import megatron.training, torch, numpy; import importlib.metadata as m; print('megatron-core', m.version('megatron-core'), 'torch', torch.__version__, 'numpy', numpy.__version__)"
