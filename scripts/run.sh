#!/usr/bin/env bash
# The main job on a fresh machine: install, build, then
#   1. the device report, the op sweep against the CPU float64 reference, and op benchmarks;
#   2. a real text corpus from /usr/share/common-licenses, tokenized by `strata preprocess`;
#   3. a small GPT (configs/gpt_tiny.yaml) trained for a few minutes on it (CPU, or a GPU when
#      one is usable: training.device=auto), with the loss falling in Megatron's log format.
# Extra arguments are passed to `strata train` as overrides, e.g. training.train_iters=100.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$build"
"$build/strata" bench ops --check --quick
cd "$root"
BUILD_DIR="$build" bash scripts/prepare_corpus.sh "$build/strata"
"$build/strata" train --config configs/gpt_tiny.yaml "$@"
