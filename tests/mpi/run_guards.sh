#!/usr/bin/env bash
# run_guards.sh STRATA MPIRUN_SH WORKDIR: the second fault run's data-loss and error-reporting
# reproductions under `mpirun -np 2`, where ranks could disagree.
#  1. A relaunched finished run (train_iters 2 below the checkpoint's 4, with --no-load-optim)
#     saves nothing: every file of the checkpoint directory is unchanged, byte for byte.
#  2. The tracker deleted: the run is refused, the error printed once for the job, nothing written;
#     a manifest without its config, refused once; data of EOD tokens only at dp 2: no loss logged.
#  3. User errors met after the config stage print once for the job and name no source file:
#     a truncated checkpoint file, data without EOD under the packed-sequence flags, a corrupt
#     SentencePiece model, data whose ids exceed the model's vocabulary.
#  4. A one-process command (generate) under the launcher: refused once, before any work.
set -euo pipefail
strata=$1; mpirun_sh=$2; work=$3
rm -rf "$work"; mkdir -p "$work"
printf 'data:\n  mock_data: true\n' >"$work/run.yaml"
model=(model.num_layers=2 model.hidden_size=32 model.num_attention_heads=4 model.seq_length=16
       training.micro_batch_size=1 training.device=cpu training.eval_iters=0 optimizer.lr=1.0e-3 logging.log_interval=1)
ckpt="$work/ckpt"
train() { "$mpirun_sh" -np 2 "$strata" train --config "$work/run.yaml" "${model[@]}" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

# Exactly one `strata: error:` line in FILE, matching REGEX, without a source location.
once() {
  local file=$1 regex=$2 n
  n=$(grep -c "strata: error:" "$file" || true)
  [[ $n -eq 1 ]] || { cat "$file"; fail "$(basename "$file"): $n error lines (expected one for the job)"; }
  grep -Eq "$regex" "$file" || { cat "$file"; fail "$(basename "$file"): the error does not match: $regex"; }
  if grep "strata: error:" "$file" | grep -Eq '\.(cpp|cc|h|cu)(:|\()[0-9]|\(config:0\)'; then
    cat "$file"; fail "$(basename "$file"): the error names a source location"
  fi
  return 0
}
# The command must fail; its output goes to FILE.
must_fail() {
  local file=$1; shift
  if "$@" >"$file" 2>&1; then cat "$file"; fail "$(basename "$file"): the run succeeded"; fi
  return 0
}

# 1. Relaunching the finished run.
train training.train_iters=4 checkpoint.save="$ckpt" checkpoint.load="$ckpt" checkpoint.save_interval=2 \
  >"$work/first.txt" 2>&1 || { cat "$work/first.txt"; fail "the first run exited non-zero"; }
(cd "$ckpt" && find . -type f -exec md5sum {} + | sort) >"$work/before.md5"
train training.train_iters=2 checkpoint.save="$ckpt" checkpoint.load="$ckpt" --no-load-optim \
  >"$work/relaunch.txt" 2>&1 || { cat "$work/relaunch.txt"; fail "the relaunch exited non-zero"; }
(cd "$ckpt" && find . -type f -exec md5sum {} + | sort) >"$work/after.md5"
cmp -s "$work/before.md5" "$work/after.md5" || { diff "$work/before.md5" "$work/after.md5"; fail "the relaunch rewrote the checkpoint"; }
n=$(grep -c "nothing to train" "$work/relaunch.txt" || true)
[[ $n -eq 1 ]] || { cat "$work/relaunch.txt"; fail "'nothing to train' printed $n times"; }
grep -q "saved checkpoint" "$work/relaunch.txt" && fail "the relaunch saved a checkpoint"

# 2. No tracker.
rm "$ckpt/latest_checkpointed_iteration.txt"
must_fail "$work/no_tracker.txt" train training.train_iters=6 checkpoint.save="$ckpt" checkpoint.load="$ckpt"
once "$work/no_tracker.txt" "ConfigError: checkpoint.load: .* holds checkpoints \(iterations 2, 4\) but no latest_checkpointed_iteration.txt"
[[ ! -e "$ckpt/latest_checkpointed_iteration.txt" && ! -e "$ckpt/iter_0000006" ]] || fail "the refused run wrote to $ckpt"
echo 4 >"$ckpt/latest_checkpointed_iteration.txt"

# A manifest without its config: refused once (every rank checks it before allocating).
python3 - "$ckpt/iter_0000004/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m.pop("config"); json.dump(m, open(sys.argv[1], "w"))
PY
must_fail "$work/no_config.txt" train training.train_iters=6 checkpoint.save="$ckpt" checkpoint.load="$ckpt"
once "$work/no_config.txt" "its manifest.json has no \"config\""

# Data of EOD tokens only under --eod-mask-loss at dp 2: no rank counts a token, no loss is logged.
for d in $(seq 1 40); do printf '99\n\n'; done >"$work/eod.txt"
"$strata" preprocess --input "$work/eod.txt" --output-prefix "$work/eod" --tokenizer-type NullTokenizer \
  --vocab-size 100 --split-paragraphs --append-eod >/dev/null
train training.train_iters=2 data.mock_data=false "data.data_path=[$work/eod_text_document]" data.split=1 \
  data.tokenizer_type=NullTokenizer model.vocab_size=100 --eod-mask-loss --reset-position-ids --reset-attention-mask \
  logging.metrics_jsonl="$work/eod.jsonl" >"$work/eod_run.txt" 2>&1 || { cat "$work/eod_run.txt"; fail "the EOD run failed"; }
grep -q '"lm loss"' "$work/eod.jsonl" && { cat "$work/eod.jsonl"; fail "a loss was logged for steps without a counted token"; }
n=$(grep -c "no token was counted in the loss" "$work/eod_run.txt" || true)
[[ $n -eq 1 ]] || { cat "$work/eod_run.txt"; fail "the no-token warning printed $n times"; }

# 3. Errors after the config stage, once and without a source location.
truncate -s 100 "$ckpt/iter_0000004/model_rank_0000.safetensors"
must_fail "$work/truncated.txt" train training.train_iters=6 checkpoint.load="$ckpt" \
  checkpoint.allow_unchecked_architecture=true checkpoint.override_opt_param_scheduler=true
once "$work/truncated.txt" "model_rank_0000.safetensors is truncated or corrupt"

printf 'Document one is here.\n\nDocument two follows it.\n\n' >"$work/docs.txt"
"$strata" preprocess --input "$work/docs.txt" --output-prefix "$work/noeod" --tokenizer-type ByteLevelTokenizer \
  --split-paragraphs >/dev/null
must_fail "$work/packed.txt" train training.train_iters=2 data.mock_data=false \
  "data.data_path=[$work/noeod_text_document]" data.split=1 --reset-attention-mask --eod-mask-loss
once "$work/packed.txt" "ConfigError: data.reset_attention_mask: .*--append-eod"

head -c 2000 /dev/urandom >"$work/bad.model"
must_fail "$work/spm.txt" train training.train_iters=2 data.tokenizer_type=SentencePieceTokenizer \
  data.tokenizer_model="$work/bad.model"
once "$work/spm.txt" "bad.model is not a SentencePiece model"

"$strata" preprocess --input "$work/docs.txt" --output-prefix "$work/bytes" --tokenizer-type ByteLevelTokenizer \
  --split-paragraphs --append-eod >/dev/null
must_fail "$work/vocab.txt" train training.train_iters=2 data.mock_data=false "data.data_path=[$work/bytes_text_document]" \
  data.split=1 data.tokenizer_type=NullTokenizer model.vocab_size=40
once "$work/vocab.txt" "token id|vocab"
cp "$work/bytes_text_document.idx" "$work/nobin_text_document.idx"  # an index without its .bin
must_fail "$work/nobin.txt" train training.train_iters=2 data.mock_data=false "data.data_path=[$work/nobin_text_document]" \
  data.split=1
once "$work/nobin.txt" "nobin_text_document.bin"

# One-process commands under a launcher: refused once, before doing anything (generate would print
# the same text from every rank, interleaved; export and preprocess would write the same files).
must_fail "$work/generate.txt" "$mpirun_sh" -np 2 "$strata" generate --load "$ckpt" --prompt-ids 1,2,3 \
  --max-new-tokens 2
once "$work/generate.txt" "strata generate runs in one process, but the launcher started 2"
n=$(grep -c "no usable GPU" "$work/generate.txt" || true)
[[ $n -le 1 ]] || { cat "$work/generate.txt"; fail "'no usable GPU' printed $n times"; }
echo "PASS"
