#!/usr/bin/env bash
# ctest torch_writers_interop: the unit-test binary writes torch.save archives and a distributed
# checkpoint (hidden Catch case [.torch_writers_interop]), and check_torch_writers.py loads them with
# real torch. Python: $STRATA_TORCH_PYTHON, else the repository's .mcore-venv (scripts/megatron/checkpoint_fixtures/setup_venv.sh); exits 77
# (ctest SKIP_RETURN_CODE) when neither has torch >= 2.4.
# Usage: run_check_torch_writers.sh <strata_unit_tests>
set -euo pipefail
binary="$1"
here="$(cd "$(dirname "$0")" && pwd)"
python=""
for candidate in "${STRATA_TORCH_PYTHON:-}" "$here/../../.mcore-venv/bin/python"; do
  [[ -n "$candidate" && -x "$candidate" ]] || continue
  if "$candidate" -c 'import sys, torch; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(0 if v >= (2, 4) else 1)' 2>/dev/null; then
    python="$candidate"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "SKIP: no Python with torch >= 2.4 (set STRATA_TORCH_PYTHON)"
  exit 77
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
STRATA_TORCH_WRITERS_OUT="$out" "$binary" --use-colour no "[.torch_writers_interop]"
"$python" "$here/check_torch_writers.py" "$out"
