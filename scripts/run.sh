#!/usr/bin/env bash
# The main job on a fresh machine: install, build, then
#   1. the op sweep against the CPU float64 reference (strata_op_sweep --summary: one line, or the
#      failing cases), then the device report and op benchmarks (strata bench ops);
#   2. a real text corpus from /usr/share/common-licenses, tokenized by `strata preprocess`;
#   3. a small GPT (configs/gpt_tiny.yaml) trained for a few minutes on it (CPU, or a GPU when
#      one is usable: training.device=auto), with the loss falling in Megatron's log format;
#   4. a sample from the model before training and one after (`strata generate`, KV-cached sampling);
#   5. out/gpt_tiny/loss.png: train and validation loss against the iteration (scripts/plot_metrics.py).
# Extra arguments are passed to `strata train` as overrides, e.g. training.train_iters=100.
# It builds the `strata` and `strata_op_sweep` targets only, and the CUDA backend only where a GPU
# is usable (or with STRATA_CUDA=ON); scripts/test.sh builds everything, CUDA wherever the toolkit
# is present.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [[ -z "${STRATA_CUDA:-}" ]]; then
  if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q GPU; then
    export STRATA_CUDA=AUTO
  else
    export STRATA_CUDA=OFF  # no usable GPU: the CUDA objects would only cost build time
  fi
fi
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$build" strata strata_op_sweep
"$build/strata_op_sweep" --quick --summary
"$build/strata" bench ops --quick
cd "$root"
BUILD_DIR="$build" bash scripts/prepare_corpus.sh "$build/strata"
prompt="This program is free software"
sample() {  # $1: generate's model flags; prints the sample and its share of corpus words
  local text
  text="$("$build/strata" generate $1 --prompt "$prompt" --max-new-tokens 96)"  # 128 positions
  printf '%s\n' "$text"
  printf '%s' "$text" | python3 scripts/word_share.py out/corpus/licenses.txt "$prompt"
}
echo "---- sample from the untrained model ----"
sample "--config configs/gpt_tiny.yaml"
"$build/strata" train --config configs/gpt_tiny.yaml "$@"
echo "---- sample from the trained model ----"
sample "--load out/gpt_tiny/checkpoints"
plot="$(/usr/bin/python3 scripts/plot_metrics.py out/gpt_tiny --output out/gpt_tiny/loss.png)"
echo "---- train and validation loss: $plot ----"
