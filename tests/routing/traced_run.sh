#!/usr/bin/env bash
# A real traced run read by the analysis tools: `strata train` on configs/moe_tiny.yaml (mock data,
# 3 iterations, one evaluation pass) with Megatron's trace flags (hidden states, weight dump), then
# `strata generate` from its checkpoint traced by --config-override, then
# scripts/moe_routing/routing.py all on the training trace: record counts (4 MoE layers x 2
# micro-batches x (3 + 1) steps; 3 generation forwards x 4 layers) and the three analyses' CSVs
# (predictability: the 3 consecutive layer pairs).
#   traced_run.sh STRATA_BINARY SOURCE_DIR WORK_DIR
set -euo pipefail
strata="$1" src="$2" work="$3"
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1
"$strata" train --config "$src/configs/moe_tiny.yaml" "data.data_path=[]" data.mock_data=true \
  training.train_iters=3 optimizer.lr_warmup_iters=1 training.eval_interval=2 training.eval_iters=1 \
  logging.tensorboard_dir=null logging.metrics_jsonl=null logging.log_interval=1 "checkpoint.save=$work/ckpt" \
  --moe-routing-trace-path "$work/trace" --moe-routing-trace-capture-hidden-states \
  --moe-routing-trace-dump-weights > "$work/train.log"
lines() { wc -l < "$1" | tr -d ' '; }
[ "$(lines "$work/trace/router_trace_rank0.jsonl")" = 32 ] || { echo "train trace: $(lines "$work/trace/router_trace_rank0.jsonl") records, want 32"; exit 1; }
[ "$(grep -c '"phase": "eval"' "$work/trace/router_trace_rank0.jsonl")" = 8 ] || { echo "want 8 eval records"; exit 1; }
"$strata" generate --load "$work/ckpt" --prompt-ids 1,2,3 --max-new-tokens 3 --temperature 0 \
  --config-override "logging.moe_routing_trace_path=$work/gen" > /dev/null
[ "$(lines "$work/gen/router_trace_rank0.jsonl")" = 12 ] || { echo "generation trace: want 12 records"; exit 1; }
[ "$(lines "$work/trace/router_trace_rank0.jsonl")" = 32 ] || { echo "generation touched the training trace"; exit 1; }
/usr/bin/python3 "$src/scripts/moe_routing/routing.py" all "$work/trace" --output-dir "$work/plots" > "$work/analysis.log"
for f in concentration_per_layer.csv expert_frequencies_per_layer.csv predictability_per_layer.csv ep_load_imbalance.csv; do
  [ -s "$work/plots/$f" ] || { echo "missing $f"; cat "$work/analysis.log"; exit 1; }
done
[ "$(tail -n +2 "$work/plots/predictability_per_layer.csv" | wc -l | tr -d ' ')" = 3 ] || { echo "want 3 layer pairs"; exit 1; }
echo "traced run: ok"
