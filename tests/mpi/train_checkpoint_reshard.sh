#!/usr/bin/env bash
# train_checkpoint_reshard.sh STRATA MPIRUN_SH WORKDIR: sharded checkpoints through the real CLI.
# `mpirun -np 4 strata train` at TP2×PP2 (Llama-shaped tiny GPT, mock data, byte-level vocabulary
# of 257 padded to a multiple of 128·tp: 512 rows) saves at iteration 4; passes when the iteration directory holds one model
# file per tensor-parallel/pipeline rank plus a version-2 manifest, the tracker names 4, a
# single-process `strata train` resumes from it (TP1×PP1; make_vocab_size_divisible_by=256 keeps
# the 512 padded rows, the same global model) to iteration 6, `mpirun -np 2 strata train` resumes
# from it at DP2 with the distributed optimizer, and `strata export --format hf` exports it from one
# process (its tp-1 model pads to 384 rows: the weights-only reader takes the common rows); a CP2
# run (ring exchange) loading it continues with the TP1 run's losses. The resumed runs extend
# train_iters 4 → 6, so the learning-rate schedule changes: checkpoint.override_opt_param_scheduler
# (Megatron's --override-opt_param-scheduler) takes the config's. The TP2×PP2 run again with
# --async-save writes the same bytes.
set -euo pipefail
strata=$1; mpirun_sh=$2; work=$3
rm -rf "$work"; mkdir -p "$work"
printf 'data:\n  mock_data: true\n' >"$work/run.yaml"
common=(model.num_layers=4 model.hidden_size=32 model.num_attention_heads=4 model.seq_length=16
  model.max_position_embeddings=16 model.hidden_dropout=0.1 model.attention_dropout=0.1
  model.normalization=RMSNorm model.swiglu=true model.ffn_hidden_size=64 model.position_embedding_type=rope
  model.add_bias_linear=false model.untie_embeddings_and_output_weights=true
  training.micro_batch_size=2 training.global_batch_size=8 training.device=cpu
  training.eval_interval=1000 training.eval_iters=1 optimizer.lr=1.0e-3 logging.log_interval=1)
fail() { echo "FAIL: $1"; exit 1; }
"$mpirun_sh" -np 4 "$strata" train --config "$work/run.yaml" "${common[@]}" training.train_iters=4 \
  parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2 \
  checkpoint.save="$work/ckpt" checkpoint.save_interval=4 >"$work/save.txt" 2>&1 \
  || { cat "$work/save.txt"; fail "mpirun -np 4 strata train (TP2xPP2, save) exited non-zero"; }
[[ "$(cat "$work/ckpt/latest_checkpointed_iteration.txt")" == "4" ]] || fail "tracker does not name iteration 4"
for r in 0 1 2 3; do
  [[ -f "$work/ckpt/iter_0000004/model_rank_000$r.safetensors" ]] || fail "model_rank_000$r.safetensors missing"
done
grep -q '"version": 2' "$work/ckpt/iter_0000004/manifest.json" || fail "manifest is not version 2"
# The same run with --async-save (every rank's files written by a background thread, saves at 2 and
# 4 finalized collectively): the same losses and byte-identical files.
"$mpirun_sh" -np 4 "$strata" train --config "$work/run.yaml" "${common[@]}" training.train_iters=4 \
  parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2 --async-save \
  checkpoint.save="$work/ckpt_async" checkpoint.save_interval=2 >"$work/save_async.txt" 2>&1 \
  || { cat "$work/save_async.txt"; fail "mpirun -np 4 strata train --async-save exited non-zero"; }
[[ "$(cat "$work/ckpt_async/latest_checkpointed_iteration.txt")" == "4" ]] || fail "async: tracker does not name 4"
for f in model_rank_0000 model_rank_0001 model_rank_0002 model_rank_0003 optimizer_rank_0000 optimizer_rank_0001 \
  optimizer_rank_0002 optimizer_rank_0003; do
  cmp -s "$work/ckpt/iter_0000004/$f.safetensors" "$work/ckpt_async/iter_0000004/$f.safetensors" \
    || fail "async: $f.safetensors differs from the synchronous save's"
done
cmp -s <(grep -oE "lm loss: [0-9.E+-]+" "$work/save.txt") <(grep -oE "lm loss: [0-9.E+-]+" "$work/save_async.txt") \
  || fail "async: the losses differ from the synchronous run's"
grep -q "saving checkpoint at iteration 2 in the background" "$work/save_async.txt" || fail "async: no background save"
"$strata" train --config "$work/run.yaml" "${common[@]}" training.train_iters=6 checkpoint.override_opt_param_scheduler=true \
  model.make_vocab_size_divisible_by=256 checkpoint.load="$work/ckpt" >"$work/tp1.txt" 2>&1 || { cat "$work/tp1.txt"; fail "strata train (TP1, load) exited non-zero"; }
grep -q "loaded checkpoint from .* at iteration 4" "$work/tp1.txt" || { cat "$work/tp1.txt"; fail "TP1 run did not load iteration 4"; }
grep -qE "iteration +6/ +6 \|" "$work/tp1.txt" || { cat "$work/tp1.txt"; fail "TP1 run did not reach iteration 6"; }
"$mpirun_sh" -np 2 "$strata" train --config "$work/run.yaml" "${common[@]}" training.train_iters=6 checkpoint.override_opt_param_scheduler=true \
  model.make_vocab_size_divisible_by=256 parallel.use_distributed_optimizer=true checkpoint.load="$work/ckpt" >"$work/dp2.txt" 2>&1 \
  || { cat "$work/dp2.txt"; fail "mpirun -np 2 strata train (DP2, load) exited non-zero"; }
grep -qE "iteration +6/ +6 \|" "$work/dp2.txt" || { cat "$work/dp2.txt"; fail "DP2 run did not reach iteration 6"; }
# Context parallelism reads the same checkpoint: CP2 (ring K/V exchange) continues with the TP1
# run's losses (within 1e-5 relative; the printed values have 7 significant digits).
"$mpirun_sh" -np 2 "$strata" train --config "$work/run.yaml" "${common[@]}" training.train_iters=6 checkpoint.override_opt_param_scheduler=true \
  model.make_vocab_size_divisible_by=256 parallel.context_parallel_size=2 parallel.cp_comm_type=p2p \
  checkpoint.load="$work/ckpt" >"$work/cp2.txt" 2>&1 \
  || { cat "$work/cp2.txt"; fail "mpirun -np 2 strata train (CP2, load) exited non-zero"; }
losses() { grep -oE "lm loss: [0-9.E+-]+" "$1" | awk '{print $3}'; }
[[ $(losses "$work/cp2.txt" | wc -l) -eq 2 ]] || { cat "$work/cp2.txt"; fail "CP2 run did not log iterations 5 and 6"; }
paste <(losses "$work/tp1.txt") <(losses "$work/cp2.txt") | awk '
  { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1)) { print "loss " NR ": TP1 " $1 " CP2 " $2; bad = 1 } }
  END { exit bad }' || fail "CP2 losses differ from the TP1 run after loading the TP2xPP2 checkpoint"
"$strata" export --load "$work/ckpt" --format hf --out "$work/hf" >"$work/export.txt" 2>&1 \
  || { cat "$work/export.txt"; fail "strata export --format hf exited non-zero"; }
[[ -f "$work/hf/model.safetensors" ]] || fail "export wrote no model.safetensors"
echo "PASS"
