#!/usr/bin/env bash
# train_data_parallel.sh STRATA MPIRUN_SH WORKDIR: the real `strata train` under `mpirun -np 2` on
# mock data (tiny GPT, dp 2, distributed optimizer, 4 iterations, a checkpoint at 4). Passes when
# the job exits 0, each iteration's log line is printed once (by the last rank only, Megatron's
# print_rank_last), the JSONL holds one record per iteration, and the checkpoint tracker names
# iteration 4 next to iter_0000004/ with its model and optimizer files. Then a second, fresh run
# into the same checkpoint directory: refused (another run's checkpoints), the config error
# printed once for the job, not once per rank.
set -euo pipefail
strata=$1; mpirun_sh=$2; work=$3
rm -rf "$work"; mkdir -p "$work"
out="$work/stdout.txt"
printf 'data:\n  mock_data: true\n' >"$work/run.yaml"
"$mpirun_sh" -np 2 "$strata" train --config "$work/run.yaml" \
  model.num_layers=2 model.hidden_size=32 model.num_attention_heads=4 model.seq_length=16 \
  model.max_position_embeddings=16 model.hidden_dropout=0.1 model.attention_dropout=0.1 \
  training.micro_batch_size=2 training.global_batch_size=8 training.train_iters=4 training.device=cpu \
  training.eval_interval=1000 training.eval_iters=1 optimizer.lr=1.0e-3 logging.log_interval=1 \
  parallel.use_distributed_optimizer=true \
  checkpoint.save="$work/ckpt" checkpoint.save_interval=4 \
  logging.metrics_jsonl="$work/metrics.jsonl" >"$out" 2>&1 || { cat "$out"; echo "FAIL: strata train exited non-zero"; exit 1; }
cat "$out"
for i in 1 2 3 4; do
  n=$(grep -cE "iteration +$i/ +4 \|" "$out" || true)
  if [[ $n -ne 1 ]]; then echo "FAIL: the log line of iteration $i appears $n times (expected once, from the last rank)"; exit 1; fi
done
records=$(grep -c '"lm loss"' "$work/metrics.jsonl" || true)
if [[ $records -ne 4 ]]; then echo "FAIL: metrics.jsonl has $records loss records (expected 4)"; exit 1; fi
if [[ "$(cat "$work/ckpt/latest_checkpointed_iteration.txt")" != "4" ]]; then echo "FAIL: tracker does not name iteration 4"; exit 1; fi
for f in model_rank_0000.safetensors optimizer_rank_0000.safetensors manifest.json; do
  [[ -f "$work/ckpt/iter_0000004/$f" ]] || { echo "FAIL: iter_0000004/$f missing"; exit 1; }
done
# Sharded checkpoint: the dp replica (rank 1) writes nothing.
[[ ! -e "$work/ckpt/iter_0000004/model_rank_0001.safetensors" ]] || { echo "FAIL: dp rank 1 wrote a replica"; exit 1; }
# A fresh run into the same directory: every rank exits 1, one line says why.
again="$work/again.txt"
if "$mpirun_sh" -np 2 "$strata" train --config "$work/run.yaml" model.num_layers=2 model.hidden_size=32 \
    model.num_attention_heads=4 model.seq_length=16 training.train_iters=4 training.device=cpu optimizer.lr=1.0e-3 \
    checkpoint.save="$work/ckpt" >"$again" 2>&1; then
  cat "$again"; echo "FAIL: a fresh run replaced another run's checkpoints"; exit 1
fi
cat "$again"
n=$(grep -c "strata: error: ConfigError: checkpoint.save: .* holds another run's checkpoints" "$again" || true)
if [[ $n -ne 1 ]]; then echo "FAIL: the config error is printed $n times (expected once for the job)"; exit 1; fi
echo "PASS"
