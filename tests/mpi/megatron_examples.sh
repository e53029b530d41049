#!/usr/bin/env bash
# megatron_examples.sh STRATA MPIRUN_SH WORKDIR: Megatron-LM's own example launch scripts, argument
# lists as the scripts write them (examples/llama/train_llama3_8b_h100_fp8.sh with bf16,
# examples/mixtral/train_mixtral_8x7b_distributed.sh, examples/mamba/train.sh,
# examples/gpt3/train_gpt3_175b_distributed.sh, and the Llama and Qwen model files of
# examples/post_training/modelopt/conf), sizes and parallel layouts scaled down to a few
# ranks, tokenizer and data replaced by --mock-data, paths by WORKDIR. Each either trains its
# iterations under mpirun, or fails naming the Megatron feature Strata lacks; the second kind is
# listed here explicitly (EXPECT_MISSING) and shrinks as the features land.
set -uo pipefail
strata=$1; mpirun_sh=$2; work=$3
rm -rf "$work"; mkdir -p "$work"
fail=0
mock=(--mock-data --tokenizer-type NullTokenizer --vocab-size 512)

# run NAME NP EXPECT ARGS…: EXPECT "train" (exit 0, the last iteration logged once) or the text of
# the error that names the missing feature.
run() {
  local name=$1 np=$2 expect=$3; shift 3
  local out="$work/$name.txt"
  "$mpirun_sh" -np "$np" "$strata" train "$@" training.device=cpu >"$out" 2>&1
  local rc=$?
  if [[ $expect == train ]]; then
    if [[ $rc -ne 0 ]] || ! grep -qE "iteration +[0-9]+/ +[0-9]+ \|" "$out"; then
      echo "FAIL: $name did not train (rc $rc)"; tail -20 "$out"; fail=1; return
    fi
    echo "ok: $name trained ($(grep -cE "iteration +[0-9]+/" "$out") log lines)"
  else
    if [[ $rc -eq 0 ]] || ! grep -qF -- "$expect" "$out"; then
      echo "FAIL: $name should fail naming '$expect' (rc $rc)"; tail -20 "$out"; fail=1; return
    fi
    if grep -qE '\.(cpp|h):[0-9]+' "$out"; then echo "FAIL: $name's error prints a source path"; fail=1; return; fi
    echo "ok: $name fails naming the missing feature: $(grep -F -- "$expect" "$out" | head -1 | cut -c1-160)"
  fi
}

# examples/llama/train_llama3_8b_h100_fp8.sh, bf16 (the fp8 flags left out), TP1 CP1 PP1 as the
# script sets them, on 2 ranks of data parallelism.
llama=(--use-mcore-models --num-layers 2 --hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 4
  --group-query-attention --num-query-groups 2 --kv-channels 16 --seq-length 64 --max-position-embeddings 64
  --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0
  --hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134 --attention-backend fused
  --apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear --micro-batch-size 1
  --global-batch-size 8 --train-samples 32 --lr-decay-samples 24 --lr-warmup-samples 8 --lr 0.00015
  --min-lr 0.00001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5 --lr-decay-style cosine --clip-grad 1.0
  --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16 --grad-reduce-in-bf16
  --cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc --empty-unused-memory-level 1
  --exit-duration-in-mins 235 --tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather "${mock[@]}"
  --data-cache-path "$work/cache" --split 99,1,0 --no-create-attention-mask-in-dataloader
  --no-mmap-bin-files --num-workers 1 --log-interval 1 --eval-iters 1 --eval-interval 1000)
run llama3_8b 2 train "${llama[@]}"

# examples/mixtral/train_mixtral_8x7b_distributed.sh: TP1, PP4 → PP2, EP8 → EP2 (4 ranks).
mixtral=(--use-mcore-models --disable-bias-linear --seq-length 64 --max-position-embeddings 128 --num-layers 2
  --hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 4 --init-method-std 0.01 --attention-dropout 0.0
  --hidden-dropout 0.0 --normalization RMSNorm --position-embedding-type rope --swiglu
  --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2 --no-masked-softmax-fusion
  --no-position-embedding --rotary-base 1000000 --num-experts 4 --moe-router-topk 2
  --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2 --moe-grouped-gemm
  --moe-token-dispatcher-type alltoall --overlap-param-gather --overlap-grad-reduce "${mock[@]}"
  --split 99990,8,2 --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 --train-iters 3 --lr-decay-iters 3
  --lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 0.1 --lr-warmup-iters 1 --clip-grad 1.0 --bf16
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2
  --use-distributed-optimizer --sequence-parallel --log-interval 1 --save-interval 10000 --eval-interval 1000
  --eval-iters 1 --save "$work/mixtral_ckpt" --load "$work/mixtral_ckpt"
  --tensorboard-dir "$work/mixtral_ckpt/tensorboard" --no-load-optim --no-load-rng)
# EXPECT_MISSING: --wandb-project / --wandb-exp-name (Weights & Biases logging).
run mixtral_8x7b_wandb 4 "Weights & Biases" "${mixtral[@]}" --wandb-project Mixtral --wandb-exp-name Mixtral_8x7B
run mixtral_8x7b 4 train "${mixtral[@]}"

# examples/mamba/train.sh: TP2 with sequence parallelism, sample-based schedule, the hybrid spec.
mamba=(--tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 1
  --use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce --untie-embeddings-and-output-weights
  --init-method-std 0.02 --position-embedding-type none --hybrid-layer-pattern "M-M*-" --hidden-size 64
  --num-attention-heads 4 --group-query-attention --num-query-groups 2 --seq-length 64 --max-position-embeddings 64
  --train-samples 24 --lr-warmup-samples 8 --lr-decay-samples 16 --save "$work/mamba_ckpt"
  --load "$work/mamba_ckpt" "${mock[@]}" --data-cache-path "$work/cache" --split 99,1,0
  --distributed-backend nccl --micro-batch-size 2 --global-batch-size 8 --lr 2.5e-4 --min-lr 2.5e-5
  --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 --attention-dropout 0.0 --hidden-dropout 0.0
  --disable-bias-linear --normalization RMSNorm --adam-beta1 0.9 --adam-beta2 0.95 --log-interval 1
  --save-interval 2000 --eval-interval 2000 --eval-iters 1 --bf16 --use-mcore-models
  --spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec --no-create-attention-mask-in-dataloader
  --tensorboard-dir "$work/mamba_tb" --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 16)
run mamba_hybrid 2 train "${mamba[@]}"

# examples/gpt3/train_gpt3_175b_distributed.sh: TP8 PP16 → TP2 PP2 (4 ranks), fp16, and the step
# batch-size schedule scaled to the run (thresholds in tokens: 64 tokens = 1 sample; sizes 2, 4, 8
# for 3, 3 and 2 steps: 34 samples in 8 steps). The script also passes --global-batch-size, which Megatron's own
# validate_args refuses next to a schedule ("Cannot specify both"): Strata does the same, and the
# list without it trains.
gpt3=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64
  --attention-backend auto --micro-batch-size 1 --global-batch-size 8
  --step-batch-size-schedule "0:2 384:4 1152:8" --train-iters 8 --weight-decay 0.1
  --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 --clip-grad 1.0 --lr 6.0e-5 --lr-decay-style cosine
  --min-lr 6.0e-6 --lr-warmup-fraction .001 --lr-decay-iters 8 --tensor-model-parallel-size 2
  --pipeline-model-parallel-size 2 "${mock[@]}" --split 949,50,1 --log-interval 1 --save-interval 10000
  --eval-interval 1000 --save "$work/gpt3_ckpt" --load "$work/gpt3_ckpt" --eval-iters 1
  --tensorboard-dir "$work/gpt3_tb")
# Megatron's rule, as Megatron: the schedule with --global-batch-size is refused.
run gpt3_175b_schedule_and_global_batch 4 "Cannot specify both" "${gpt3[@]}" --fp16
gpt3_scheduled=()
skip=0
for a in "${gpt3[@]}"; do
  if [[ $skip -eq 1 ]]; then skip=0; continue; fi
  if [[ $a == --global-batch-size ]]; then skip=1; continue; fi
  gpt3_scheduled+=("$a")
done
# fp16 with Megatron's dynamic loss scaling (from 2^32: the first steps overflow and are skipped).
run gpt3_175b_fp16 4 train "${gpt3_scheduled[@]}" --fp16
# The schedule's sizes in the log: 2 samples (1 micro-batch per dp rank) for 3 steps, then 4 and 8;
# the scale halving from 2^32 after the hysteresis of 2 overflows.
for want in "global batch size:     2 |" "global batch size:     4 |" "global batch size:     8 |" \
            "consumed samples:           26 |" "loss scale: 4294967296.0 |" "loss scale: 2147483648.0 |"; do
  grep -qF -- "$want" "$work/gpt3_175b_fp16.txt" || { echo "FAIL: gpt3_175b_fp16 never logged '$want'"; fail=1; }
done

# examples/post_training/modelopt/conf: the MODEL_ARGS of the Llama and Qwen model files (sizes
# scaled down, --tokenizer-type HuggingFaceTokenizer replaced by the mock data's NullTokenizer, the
# scripts' --padded-vocab-size scaled to the mock vocabulary), plus what the launch scripts add
# (lengths, learning rate, save directory).
modelopt_train=(--train-iters 2 --global-batch-size 4 --lr 1e-4 --log-interval 1 --eval-iters 0 "${mock[@]}")
llama32=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --use-rotary-position-embeddings --no-rope-fusion --no-position-embedding --normalization RMSNorm --swiglu
  --num-layers 2 --hidden-size 64 --ffn-hidden-size 256 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --seq-length 32 --max-position-embeddings 64 --make-vocab-size-divisible-by 1
  --use-mcore-models --rotary-percent 1.0 --rotary-base 500000 --use-rope-scaling)
run modelopt_llama3_2_1b_instruct 2 train "${llama32[@]}" "${modelopt_train[@]}" --save "$work/llama32_ckpt"
llama31=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --untie-embeddings-and-output-weights --use-rotary-position-embeddings --rotary-percent 1.0 --no-rope-fusion
  --no-position-embedding --normalization RMSNorm --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 224
  --num-attention-heads 4 --group-query-attention --num-query-groups 2 --seq-length 32 --max-position-embeddings 64
  --make-vocab-size-divisible-by 1 --use-mcore-models --rotary-base 500000 --use-rope-scaling)
run modelopt_llama3_1_8b_instruct 2 train "${llama31[@]}" "${modelopt_train[@]}" --tensor-model-parallel-size 2
qwen25=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --add-qkv-bias --position-embedding-type rope --no-rope-fusion --normalization RMSNorm --swiglu --num-layers 2
  --hidden-size 64 --ffn-hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2
  --kv-channels 16 --seq-length 32 --max-position-embeddings 64 --padded-vocab-size 520
  --make-vocab-size-divisible-by 1 --use-mcore-models --rotary-percent 1.0 --rotary-base 1000000
  --no-bias-swiglu-fusion --untie-embeddings-and-output-weights)
run modelopt_qwen2_5_7b_instruct 2 train "${qwen25[@]}" "${modelopt_train[@]}" --tensor-model-parallel-size 2
qwen3=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --untie-embeddings-and-output-weights --position-embedding-type rope --no-rope-fusion --normalization RMSNorm
  --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --kv-channels 16 --qk-layernorm --seq-length 32 --max-position-embeddings 64
  --make-vocab-size-divisible-by 1187 --use-mcore-models --rotary-percent 1.0 --rotary-base 1000000
  --no-bias-swiglu-fusion)
run modelopt_qwen3_8b 2 train "${qwen3[@]}" "${modelopt_train[@]}"
qwen3_moe=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --untie-embeddings-and-output-weights --position-embedding-type rope --no-rope-fusion --normalization RMSNorm
  --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --kv-channels 16 --qk-layernorm --num-experts 4 --moe-ffn-hidden-size 32
  --moe-router-topk 2 --moe-router-dtype fp32 --moe-aux-loss-coeff 1e-3 --moe-token-dispatcher-type alltoall
  --moe-router-load-balancing-type aux_loss --seq-length 32 --max-position-embeddings 64
  --make-vocab-size-divisible-by 1187 --use-mcore-models --rotary-percent 1.0 --rotary-base 1000000
  --no-bias-swiglu-fusion --sequence-parallel)
run modelopt_qwen3_30b_a3b 2 train "${qwen3_moe[@]}" "${modelopt_train[@]}" --expert-model-parallel-size 2

exit $fail
