#!/usr/bin/env bash
# megatron_examples.sh STRATA MPIRUN_SH WORKDIR: Megatron-LM's own example launch scripts, argument
# lists as the scripts write them, for the model families Strata has:
#   examples/llama/train_llama3_8b_h100_fp8.sh (bf16, and as it stands with fp8),
#   examples/mixtral/train_mixtral_8x7b_distributed.sh, examples/mamba/train.sh,
#   examples/gpt3/train_gpt3_175b_distributed.sh,
#   every model file of examples/post_training/modelopt/conf (Llama 3.1/3.2/4, Qwen 2.5/3,
#     DeepSeek-R1/V2-Lite, Kimi-K2, the NVIDIA Nemotron files, gpt-oss),
#   examples/rl/model_configs/*.sh with common.sh (their model and training flags, not the GRPO ones),
#   examples/academic_paper_scripts/sc21 (CONFIG.sh with the run_figure_*.sh / run_table_1.sh sizes).
# Sizes and parallel layouts are scaled down to at most 4 ranks, tokenizer and data replaced by
# --mock-data, paths by WORKDIR. Each either trains its iterations under mpirun, or is refused at
# a flag that docs/megatron_flags.md lists as refused (the run helper checks the table and prints
# the flag), or fails as Megatron-LM itself does (a rule of its argument checks, or a flag it no
# longer has), with the error expected. Where a script stops at a refused flag and the list trains
# without it, a second case shows that.
set -uo pipefail
strata=$1; mpirun_sh=$2; work=$3
docs="$(cd "$(dirname "$0")/../.." && pwd)/docs/megatron_flags.md"
[[ -f $docs ]] || { echo "FAIL: no $docs"; exit 1; }
rm -rf "$work"; mkdir -p "$work"
fail=0
mock=(--mock-data --tokenizer-type NullTokenizer --vocab-size 512)

# run NAME NP EXPECT ARGS…: EXPECT is
#   train    exit 0, the last iteration logged;
#   refused  exit non-zero with "ConfigError: --FLAG: not supported by Strata: …", where
#            docs/megatron_flags.md lists --FLAG as refused, or with "ConfigError: --FLAG: 'VALUE' is
#            not supported by Strata (…)", where it lists --FLAG as accepted, no effect with "other
#            values refused" (a value Strata does not have); the flag that stopped it is printed;
#   TEXT     exit non-zero with an error that contains TEXT (a Megatron rule Strata applies).
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
    return
  fi
  if grep -qE '\.(cpp|h):[0-9]+' "$out"; then echo "FAIL: $name's error prints a source path"; fail=1; return; fi
  if [[ $expect == refused ]]; then
    local line flag
    line=$(grep -m1 -E "ConfigError: --[A-Za-z0-9-]+: " "$out")
    flag=$(sed -E 's/.*ConfigError: (--[A-Za-z0-9-]+): .*/\1/' <<<"$line")
    if [[ $rc -eq 0 || -z $line ]]; then
      echo "FAIL: $name should be refused at a flag (rc $rc)"; tail -20 "$out"; fail=1; return
    fi
    if [[ $line == *"ConfigError: $flag: not supported by Strata: "* ]]; then
      if ! grep -qF -- "| \`$flag\` | refused |" "$docs"; then
        echo "FAIL: $name stopped at $flag, which docs/megatron_flags.md does not list as refused"; fail=1; return
      fi
    elif [[ $line == *"ConfigError: $flag: '"*"' is not supported by Strata ("* ]]; then
      if ! grep -F -- "| \`$flag\` | accepted, no effect |" "$docs" | grep -qF "other values refused)"; then
        echo "FAIL: $name stopped at a value of $flag, which docs/megatron_flags.md does not list as" \
             "accepted with other values refused"; fail=1; return
      fi
    else
      echo "FAIL: $name stopped at $flag, not as a refused flag: $line"; fail=1; return
    fi
    echo "ok: $name refused at $flag: $(sed -E 's/.*ConfigError: --[A-Za-z0-9-]+: //' <<<"$line" | cut -c1-140)"
    return
  fi
  if [[ $rc -eq 0 ]] || ! grep -qF -- "$expect" "$out"; then
    echo "FAIL: $name should fail naming '$expect' (rc $rc)"; tail -20 "$out"; fail=1; return
  fi
  echo "ok: $name fails as Megatron does: $(grep -F -- "$expect" "$out" | head -1 | cut -c1-160)"
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
# The script as it stands (DTYPE=fp8) adds --fp8-format hybrid --fp8-amax-history-len 1024
# --fp8-amax-compute-algo max --fp8-param-gather: FP8 training is refused.
run llama3_8b_fp8 2 refused "${llama[@]}" --fp8-format hybrid --fp8-amax-history-len 1024 \
  --fp8-amax-compute-algo max --fp8-param-gather

# examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh without its FSDP branch (USE_MEGATRON_FSDP=0):
# TP1 EP8 → EP2 on 2 ranks, 61 layers → 4 (3 dense, as [0]*3+[1]*58), 256 experts in 8 groups →
# 8 in 4, sizes scaled down, MLA with YaRN, the flex dispatcher, MTP, and the recompute modules
# mlp moe mla_up_proj layernorm; mock data instead of DeepSeek-V3's tokenizer and data path.
deepseek_v3=(--distributed-timeout-minutes 60 --tensor-model-parallel-size 1 --expert-model-parallel-size 2
  --expert-tensor-parallel-size 1 --context-parallel-size 1 --use-distributed-optimizer --overlap-grad-reduce
  --overlap-param-gather --use-mcore-models --sequence-parallel --use-flash-attn --disable-bias-linear
  --micro-batch-size 1 --global-batch-size 4 --train-samples 16 --exit-duration-in-mins 220
  --no-check-for-nan-in-loss-and-grad --manual-gc --manual-gc-interval 10 --recompute-granularity selective
  --recompute-modules mlp moe mla_up_proj layernorm --transformer-impl transformer_engine --seq-length 32
  --data-cache-path "$work/cache" "${mock[@]}" --split 99,1,0 --no-mmap-bin-files
  --no-create-attention-mask-in-dataloader --num-workers 1 --num-layers 4 --hidden-size 64 --ffn-hidden-size 160
  --num-attention-heads 4 --kv-channels 16 --max-position-embeddings 32 --position-embedding-type rope
  --rotary-base 10000 --make-vocab-size-divisible-by 32 --normalization RMSNorm --norm-epsilon 1e-6 --swiglu
  --untie-embeddings-and-output-weights --multi-latent-attention --attention-dropout 0.0 --hidden-dropout 0.0
  --clip-grad 1.0 --weight-decay 0.1 --qk-layernorm --lr-decay-samples 12 --lr-warmup-samples 4
  --lr-warmup-init 3.9e-7 --lr 3.9e-6 --min-lr 3.9e-7 --lr-decay-style cosine --adam-beta1 0.9 --adam-beta2 0.95
  --num-experts 8 --moe-layer-freq "[0]*3+[1]*1" --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 32
  --moe-router-load-balancing-type seq_aux_loss --moe-router-topk 2 --moe-token-dispatcher-type flex
  --moe-flex-dispatcher-backend hybridep --moe-router-pre-softmax --moe-grouped-gemm --moe-aux-loss-coeff 1e-4
  --moe-router-group-topk 2 --moe-router-num-groups 4 --moe-router-topk-scaling-factor 2.5
  --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3
  --moe-router-dtype fp32 --moe-permute-fusion --moe-router-force-load-balancing --q-lora-rank 24 --kv-lora-rank 16
  --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 16 --rotary-scaling-factor 40 --mscale 1.0
  --mscale-all-dim 1.0 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.1 --eval-iters 1 --eval-interval 100
  --auto-detect-ckpt-format --dist-ckpt-strictness log_all --init-method-std 0.02 --log-timers-to-tensorboard
  --log-memory-to-tensorboard --log-num-zeros-in-grad --log-params-norm --log-validation-ppl-to-tensorboard
  --log-throughput --log-interval 1 --logging-level 40 --bf16 --enable-experimental)
run megatron_fsdp_deepseek_v3 2 train "${deepseek_v3[@]}"

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
# The script's --wandb-project / --wandb-exp-name (Weights & Biases logging) are refused.
run mixtral_8x7b_wandb 4 refused "${mixtral[@]}" --wandb-project Mixtral --wandb-exp-name Mixtral_8x7B
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

# The other model files of examples/post_training/modelopt/conf, the same way, with the flags of
# Megatron's post-training parser (megatron/post_training/arguments.py add_modelopt_args) as the
# files pass them. Each file that stops at a refused flag is listed with the refused flags that
# follow it.
qwen25_05b=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --add-qkv-bias --position-embedding-type rope --no-rope-fusion --normalization RMSNorm --swiglu --num-layers 2
  --hidden-size 64 --ffn-hidden-size 352 --num-attention-heads 4 --group-query-attention --num-query-groups 2
  --kv-channels 16 --seq-length 32 --max-position-embeddings 256 --padded-vocab-size 520
  --make-vocab-size-divisible-by 1 --use-mcore-models --rotary-percent 1.0 --rotary-base 1000000
  --no-bias-swiglu-fusion)
run modelopt_qwen2_5_0_5b_instruct 2 train "${qwen25_05b[@]}" "${modelopt_train[@]}"
# Qwen3-0.6B: tied embeddings, heads × kv-channels wider than the hidden size (as 16 × 128 > 1024).
qwen3_06b=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --position-embedding-type rope --no-rope-fusion --normalization RMSNorm --swiglu --num-layers 2 --hidden-size 64
  --ffn-hidden-size 192 --num-attention-heads 4 --group-query-attention --num-query-groups 2 --kv-channels 32
  --qk-layernorm --seq-length 32 --max-position-embeddings 320 --make-vocab-size-divisible-by 1187
  --use-mcore-models --rotary-percent 1.0 --rotary-base 1000000 --no-bias-swiglu-fusion)
run modelopt_qwen3_0_6b 2 train "${qwen3_06b[@]}" "${modelopt_train[@]}"
# Qwen3-235B-A22B (its --rotary-seq-len-interpolation-factor 1 leaves the positions as they are).
qwen3_235b=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --untie-embeddings-and-output-weights --position-embedding-type rope --no-rope-fusion --normalization RMSNorm
  --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --kv-channels 32 --qk-layernorm --num-experts 4 --moe-ffn-hidden-size 32 --moe-router-topk 2
  --moe-router-dtype fp32 --moe-aux-loss-coeff 1e-3 --moe-token-dispatcher-type alltoall
  --moe-router-load-balancing-type aux_loss --moe-layer-recompute --seq-length 32 --max-position-embeddings 320
  --make-vocab-size-divisible-by 1187 --use-mcore-models --rotary-percent 1.0 --rotary-base 1000000
  --rotary-seq-len-interpolation-factor 1 --no-bias-swiglu-fusion --attention-dropout 0.0 --hidden-dropout 0.0
  --sequence-parallel)
run modelopt_qwen3_235b_a22b 2 train "${qwen3_235b[@]}" "${modelopt_train[@]}" --expert-model-parallel-size 2
# DeepSeek-R1: trains (MLA with YaRN factor 40, sigmoid group-limited routing, the first layer dense).
deepseek_r1=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --untie-embeddings-and-output-weights --position-embedding-type rope --no-rope-fusion --normalization RMSNorm
  --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 4 --kv-channels 16
  --multi-latent-attention --kv-lora-rank 32 --v-head-dim 16 --q-lora-rank 48 --qk-head-dim 16 --qk-layernorm
  --qk-pos-emb-head-dim 8 --num-experts 4 --moe-layer-freq "[0]*1+[1]*1" --moe-ffn-hidden-size 32
  --moe-router-dtype fp32 --moe-router-score-function sigmoid --moe-router-bias-update-rate 1e-3
  --moe-router-enable-expert-bias --moe-router-topk 2 --moe-router-num-groups 2 --moe-router-group-topk 1
  --moe-router-pre-softmax --moe-router-topk-scaling-factor 2.5 --moe-shared-expert-overlap
  --moe-shared-expert-intermediate-size 32 --moe-aux-loss-coeff 1e-4 --moe-router-load-balancing-type seq_aux_loss
  --moe-token-dispatcher-type alltoall --moe-token-drop-policy probs --seq-length 32 --max-position-embeddings 1280
  --make-vocab-size-divisible-by 1280 --use-mcore-models --rotary-base 10000 --rotary-percent 1.0
  --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0 --recompute-activations --moe-layer-recompute
  --sequence-parallel)
run modelopt_deepseek_r1 2 train "${deepseek_r1[@]}" "${modelopt_train[@]}"
# DeepSeek-V2-Lite: trains (MLA without a query latent, YaRN with mscale 0.707 / mscale_all_dim 0.707).
deepseek_v2_lite=(--save-interval 100000 --attention-dropout 0.0 --hidden-dropout 0.0 --micro-batch-size 1 --bf16
  --no-masked-softmax-fusion --disable-bias-linear --untie-embeddings-and-output-weights
  --position-embedding-type rope --no-rope-fusion --normalization RMSNorm --norm-epsilon 1e-6 --swiglu
  --num-layers 2 --hidden-size 64 --ffn-hidden-size 320 --num-attention-heads 4 --kv-channels 16
  --multi-latent-attention --kv-lora-rank 32 --v-head-dim 16 --qk-head-dim 16 --qk-layernorm
  --qk-pos-emb-head-dim 8 --num-experts 4 --moe-layer-freq "([0]+[1]*1)" --moe-ffn-hidden-size 32
  --moe-grouped-gemm --moe-router-score-function softmax --moe-router-topk 2 --moe-router-topk-scaling-factor 1.0
  --moe-router-pre-softmax --moe-shared-expert-intermediate-size 64 --moe-aux-loss-coeff 1e-3
  --moe-token-dispatcher-type alltoall --moe-token-drop-policy probs --moe-router-load-balancing-type seq_aux_loss
  --seq-length 32 --max-position-embeddings 32 --make-vocab-size-divisible-by 3200 --attention-softmax-in-fp32
  --use-mcore-models --rotary-percent 1.0 --rotary-base 10000 --rotary-scaling-factor 40 --mscale 0.707
  --mscale-all-dim 0.707 --sequence-parallel)
run modelopt_deepseek_v2_lite 2 train "${deepseek_v2_lite[@]}" "${modelopt_train[@]}"
# Llama-4-Maverick-17B-128E-Instruct: trains with 4 layers (--no-rope-freq 4: layer 3 without RoPE;
# the file's 48 layers divide by 4, as Megatron requires).
llama4_maverick=(--recompute-activations --save-interval 100000 --micro-batch-size 1 --bf16
  --no-masked-softmax-fusion --disable-bias-linear --untie-embeddings-and-output-weights
  --position-embedding-type rope --no-rope-fusion --normalization RMSNorm --swiglu --num-layers 4 --hidden-size 64
  --ffn-hidden-size 192 --num-attention-heads 4 --group-query-attention --num-query-groups 2 --num-experts 4
  --moe-layer-freq "([0,1]*2)" --moe-layer-recompute --moe-ffn-hidden-size 96 --moe-router-score-function sigmoid
  --moe-router-topk 1 --moe-router-topk-scaling-factor 1.0 --moe-router-dtype fp32
  --moe-shared-expert-intermediate-size 96 --moe-aux-loss-coeff 1e-3 --moe-token-dispatcher-type alltoall
  --moe-token-drop-policy probs --moe-router-load-balancing-type seq_aux_loss --seq-length 32
  --max-position-embeddings 32 --make-vocab-size-divisible-by 1 --use-mcore-models --rotary-percent 1.0
  --rope-scaling-factor 8.0 --rotary-base 500000 --rotary-interleaved --no-rope-freq 4 --export-moe-apply-probs-on-input --padded-vocab-size 520)
run modelopt_llama4_maverick 2 train "${llama4_maverick[@]}" "${modelopt_train[@]}"
# Llama-4-Scout-17B-16E-Instruct: refused at --export-qk-l2-norm (Llama 4's query/key L2 norm).
llama4_scout=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --untie-embeddings-and-output-weights --position-embedding-type rope --no-rope-fusion --normalization RMSNorm
  --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --qk-layernorm --num-experts 4 --moe-ffn-hidden-size 96 --moe-router-score-function sigmoid
  --moe-router-topk 1 --moe-router-topk-scaling-factor 1.0 --moe-router-dtype fp32
  --moe-shared-expert-intermediate-size 96 --moe-aux-loss-coeff 1e-3 --moe-token-dispatcher-type alltoall
  --moe-token-drop-policy probs --moe-router-load-balancing-type seq_aux_loss --seq-length 32
  --max-position-embeddings 32 --make-vocab-size-divisible-by 128 --use-mcore-models --rotary-interleaved
  --rotary-percent 1.0 --rotary-base 500000 --rope-scaling-factor 8.0 --use-rope-scaling --sequence-parallel
  --no-bias-swiglu-fusion --export-qk-l2-norm --export-moe-apply-probs-on-input --padded-vocab-size 520)
run modelopt_llama4_scout 2 refused "${llama4_scout[@]}" "${modelopt_train[@]}" --expert-model-parallel-size 2
# Without Llama 4's query/key L2 norm, the rest (expert scaling on the input included) trains.
llama4_scout_without_l2=()
for a in "${llama4_scout[@]}"; do [[ $a == --export-qk-l2-norm ]] || llama4_scout_without_l2+=("$a"); done
run modelopt_llama4_scout_without_qk_l2_norm 2 train "${llama4_scout_without_l2[@]}" "${modelopt_train[@]}" \
  --expert-model-parallel-size 2
# moonshotai/Kimi-K2-Instruct.sh with the layout of kimi_k2_instruct.sh (TP8 ETP1 EP64 → TP2 ETP1
# EP2), and with kimi_k2_instruct_export.sh's extra arguments and PP16 → PP2 (its first and last
# stages 3 and 2 of 61 layers → 1 and 1 of 2; export.sh forces TP1 and passes TP and PP only):
# both train (MLA, YaRN factor 32).
kimi_k2=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
  --untie-embeddings-and-output-weights --position-embedding-type rope --no-rope-fusion --normalization RMSNorm
  --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 4 --kv-channels 16
  --multi-latent-attention --kv-lora-rank 32 --v-head-dim 16 --q-lora-rank 48 --qk-head-dim 16 --qk-layernorm
  --qk-pos-emb-head-dim 8 --num-experts 4 --moe-layer-freq "[0]*1+[1]*1" --moe-ffn-hidden-size 32
  --moe-router-dtype fp32 --moe-router-score-function sigmoid --moe-router-bias-update-rate 1e-3
  --moe-router-enable-expert-bias --moe-router-topk 2 --moe-router-pre-softmax --moe-router-topk-scaling-factor 2.827
  --moe-shared-expert-overlap --moe-shared-expert-intermediate-size 32 --moe-aux-loss-coeff 1e-4
  --moe-router-load-balancing-type seq_aux_loss --moe-token-dispatcher-type alltoall --moe-token-drop-policy probs
  --seq-length 32 --max-position-embeddings 1024 --make-vocab-size-divisible-by 1 --use-mcore-models
  --rotary-base 50000 --rotary-percent 1.0 --rotary-scaling-factor 32 --mscale 1.0 --mscale-all-dim 1.0
  --padded-vocab-size 520 --recompute-activations --moe-layer-recompute --sequence-parallel --trust-remote-code)
run modelopt_kimi_k2_instruct 4 train "${kimi_k2[@]}" --tensor-model-parallel-size 2 \
  --expert-tensor-parallel-size 1 --expert-model-parallel-size 2 "${modelopt_train[@]}"
run modelopt_kimi_k2_instruct_export 2 train "${kimi_k2[@]}" --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 2 "${modelopt_train[@]}" --decoder-first-pipeline-num-layers 1 \
  --decoder-last-pipeline-num-layers 1 --init-model-with-meta-device --use-cpu-initialization
# The NVIDIA Nemotron model files all begin with --trust-remote-code (accepted: Strata never runs a
# repository's code); their squared-ReLU MLPs (and Nemotron-3's fused weighted squared ReLU in the
# experts) train, Nemotron-3 Super and Ultra with latent MoE (--moe-latent-size).
# NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.sh
nemotron3_nano=(--trust-remote-code --save-interval 100000 --micro-batch-size 1 --moe-token-dispatcher-type alltoall
  --enable-experimental --moe-permute-fusion --use-fused-weighted-squared-relu --cross-entropy-loss-fusion
  --cross-entropy-fusion-impl native --moe-router-score-function sigmoid --moe-grouped-gemm --num-experts 4
  --moe-router-topk 2 --moe-aux-loss-coeff 1e-4 --moe-router-topk-scaling-factor 2.5 --moe-router-enable-expert-bias
  --moe-router-dtype fp32 --moe-router-load-balancing-type seq_aux_loss --moe-shared-expert-intermediate-size 96
  --attention-backend flash --disable-gloo-process-groups --mamba-num-heads 8 --mamba-head-dim 16
  --hybrid-layer-pattern "MEM*E" --use-mcore-models --untie-embeddings-and-output-weights --disable-bias-linear
  --init-method-std 0.0173 --position-embedding-type none --squared-relu --hidden-size 64 --num-attention-heads 4
  --group-query-attention --num-query-groups 2 --ffn-hidden-size 48 --kv-channels 32 --normalization RMSNorm
  --bf16 --seq-length 32 --max-position-embeddings 32 --export-model-type HybridModel)
run modelopt_nemotron3_nano_30b_a3b 2 train "${nemotron3_nano[@]}" "${modelopt_train[@]}"
# NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh
nemotron3_super=(--trust-remote-code --save-interval 100000 --micro-batch-size 1 --enable-experimental
  --use-fused-weighted-squared-relu --cross-entropy-loss-fusion --cross-entropy-fusion-impl native --num-experts 4
  --moe-router-score-function sigmoid --moe-grouped-gemm --moe-aux-loss-coeff 1e-4 --moe-router-topk 2
  --moe-permute-fusion --moe-router-topk-scaling-factor 5.0 --moe-router-enable-expert-bias --moe-router-dtype fp32
  --moe-router-load-balancing-type seq_aux_loss --moe-shared-expert-intermediate-size 96
  --moe-token-dispatcher-type alltoall --moe-latent-size 16 --attention-backend flash --disable-gloo-process-groups
  --is-hybrid-model --mamba-num-heads 8 --mamba-head-dim 16 --hybrid-layer-pattern "MEM*E" --use-mcore-models
  --untie-embeddings-and-output-weights --disable-bias-linear --init-method-std 0.014 --position-embedding-type none
  --squared-relu --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2
  --ffn-hidden-size 48 --kv-channels 32 --normalization RMSNorm --attention-dropout 0.0 --hidden-dropout 0.0
  --bf16 --seq-length 32 --max-position-embeddings 32 --export-model-type HybridModel)
run modelopt_nemotron3_super_120b_a12b 2 train "${nemotron3_super[@]}" "${modelopt_train[@]}"
# NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.sh (--hybrid-override-pattern and --num-layers, as written).
nemotron3_ultra=(--trust-remote-code --save-interval 100 --micro-batch-size 1 --enable-experimental
  --use-fused-weighted-squared-relu --cross-entropy-loss-fusion --cross-entropy-fusion-impl native
  --moe-permute-fusion --moe-latent-size 16 --moe-router-score-function sigmoid --moe-grouped-gemm --num-experts 4
  --moe-router-topk 2 --moe-shared-expert-intermediate-size 96 --moe-aux-loss-coeff 1e-4
  --moe-router-topk-scaling-factor 5.0 --moe-router-enable-expert-bias --moe-router-dtype fp32
  --moe-router-load-balancing-type seq_aux_loss --moe-token-dispatcher-type alltoall --attention-backend flash
  --disable-gloo-process-groups --is-hybrid-model --mamba-num-heads 8 --mamba-head-dim 16
  --hybrid-override-pattern "MEM*E" --use-mcore-models --untie-embeddings-and-output-weights --disable-bias-linear
  --init-method-std 0.0099 --position-embedding-type none --squared-relu --num-layers 5 --hidden-size 64
  --num-attention-heads 4 --group-query-attention --num-query-groups 2 --ffn-hidden-size 48 --kv-channels 32
  --normalization RMSNorm --bf16 --seq-length 32 --max-position-embeddings 32 --export-model-type HybridModel)
run modelopt_nemotron3_ultra_550b_a55b 2 train "${nemotron3_ultra[@]}" "${modelopt_train[@]}"
# NVIDIA-Nemotron-Nano-9B-v2.sh (NVIDIA-Nemotron-Nano-9B-v2-Base.sh is a link to it).
nemotron_nano_9b_v2=(--trust-remote-code --save-interval 100000 --micro-batch-size 1 --bf16
  --no-masked-softmax-fusion --disable-bias-linear --untie-embeddings-and-output-weights
  --position-embedding-type none --no-rope-fusion --normalization RMSNorm --squared-relu --hidden-size 64
  --ffn-hidden-size 224 --num-attention-heads 4 --kv-channels 16 --group-query-attention --num-query-groups 2
  --hybrid-layer-pattern "M-M*-" --mamba-head-dim 16 --mamba-num-heads 8 --mamba-num-groups 2 --mamba-state-dim 16
  --seq-length 32 --max-position-embeddings 1024 --make-vocab-size-divisible-by 1 --use-mcore-models
  --padded-vocab-size 520 --export-model-type HybridModel)
run modelopt_nemotron_nano_9b_v2 2 train "${nemotron_nano_9b_v2[@]}" "${modelopt_train[@]}"
# Nemotron-H-47B-Reasoning-128K.sh
nemotron_h_47b=(--trust-remote-code --save-interval 100000 --micro-batch-size 1 --bf16 --attention-backend flash
  --disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type none --normalization RMSNorm
  --squared-relu --hidden-size 64 --ffn-hidden-size 240 --num-attention-heads 4 --kv-channels 16
  --group-query-attention --num-query-groups 2 --hybrid-layer-pattern "M-M*-" --mamba-head-dim 16
  --mamba-num-heads 8 --mamba-num-groups 2 --mamba-state-dim 16 --seq-length 32 --max-position-embeddings 32
  --use-mcore-models --export-model-type HybridModel)
run modelopt_nemotron_h_47b_reasoning 2 train "${nemotron_h_47b[@]}" "${modelopt_train[@]}"
# Nemotron-H-4B-Instruct.sh
nemotron_h_4b=(--trust-remote-code --save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion
  --disable-bias-linear --untie-embeddings-and-output-weights --use-rotary-position-embeddings --rotary-percent 0.5
  --no-rope-fusion --no-position-embedding --normalization RMSNorm --squared-relu --hidden-size 64
  --ffn-hidden-size 256 --kv-channels 32 --num-attention-heads 4 --group-query-attention --num-query-groups 2
  --hybrid-layer-pattern "M-M*-" --mamba-head-dim 16 --mamba-num-heads 8 --mamba-num-groups 2 --mamba-state-dim 16
  --seq-length 32 --max-position-embeddings 64 --make-vocab-size-divisible-by 1 --use-mcore-models
  --rotary-base 10000 --export-model-type HybridModel)
run modelopt_nemotron_h_4b_instruct 2 train "${nemotron_h_4b[@]}" "${modelopt_train[@]}"
# Nemotron-H-56B-Base-8K.sh (its own TP8 → TP2; its default Mamba head dim 64 scaled to 16 with the
# hidden size, so that the 8 groups divide the heads).
nemotron_h_56b=(--trust-remote-code --save-interval 100000 --micro-batch-size 1 --attention-backend flash
  --hybrid-layer-pattern "M-M*-" --mamba-state-dim 16 --mamba-head-dim 16 --tiktoken-pattern v2 --use-mcore-models
  --untie-embeddings-and-output-weights --disable-bias-linear --init-method-std 0.0099 --position-embedding-type none
  --squared-relu --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2
  --ffn-hidden-size 256 --kv-channels 16 --normalization RMSNorm --exit-duration-in-mins 230
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --seq-length 32 --max-position-embeddings 32
  --bf16 --export-model-type HybridModel)
run modelopt_nemotron_h_56b_base 2 train "${nemotron_h_56b[@]}" "${modelopt_train[@]}"
# Nemotron-H-8B-Base-8K.sh
nemotron_h_8b=(--trust-remote-code --save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion
  --disable-bias-linear --untie-embeddings-and-output-weights --use-rotary-position-embeddings --no-rope-fusion
  --no-position-embedding --normalization RMSNorm --squared-relu --hidden-size 64 --ffn-hidden-size 336
  --num-attention-heads 4 --group-query-attention --num-query-groups 2 --hybrid-layer-pattern "M-M*-"
  --mamba-head-dim 16 --mamba-num-heads 8 --mamba-num-groups 2 --mamba-state-dim 16 --seq-length 32
  --max-position-embeddings 64 --make-vocab-size-divisible-by 1 --use-mcore-models --rotary-percent 0.5
  --rotary-base 500000 --export-model-type HybridModel)
run modelopt_nemotron_h_8b_base 2 train "${nemotron_h_8b[@]}" "${modelopt_train[@]}"
# Nemotron-Mini-4B-Instruct.sh (a GPT with a squared-ReLU MLP).
nemotron_mini_4b=(--trust-remote-code --save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion
  --disable-bias-linear --untie-embeddings-and-output-weights --use-rotary-position-embeddings --rotary-percent 0.5
  --no-rope-fusion --no-position-embedding --normalization LayerNorm --apply-layernorm-1p --squared-relu
  --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --seq-length 32 --max-position-embeddings 32 --make-vocab-size-divisible-by 1
  --use-mcore-models --rotary-base 10000)
run modelopt_nemotron_mini_4b_instruct 2 train "${nemotron_mini_4b[@]}" "${modelopt_train[@]}"
# openai/gpt-oss-20b.sh and gpt-oss-120b.sh (the same flags; 24 layers and 32 experts, 36 and 128):
# biases everywhere (no --disable-bias-linear), sinks, every other layer windowed (127,0 → 7,0 with the
# sequence 4096 → 32), GPT-OSS's YaRN from --enable-gpt-oss; TP2 with SP as the files' --sequence-parallel implies;
# the quick-GeGLU MLP with --glu-linear-offset 1.0 and --activation-func-clamp-value 7.0.
gpt_oss=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion
  --untie-embeddings-and-output-weights --no-rope-fusion --normalization RMSNorm --num-layers 2 --hidden-size 64
  --ffn-hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2 --kv-channels 16
  --num-experts 4 --moe-ffn-hidden-size 64 --moe-router-dtype fp32 --moe-router-topk 2 --moe-aux-loss-coeff 0.0
  --moe-token-dispatcher-type alltoall --moe-router-score-function softmax --moe-router-load-balancing-type aux_loss
  --seq-length 32 --max-position-embeddings 320 --make-vocab-size-divisible-by 128 --use-mcore-models
  --rotary-percent 1.0 --rotary-base 150000 --no-bias-gelu-fusion --sequence-parallel --export-force-local-attention
  --no-bias-dropout-fusion --padded-vocab-size 520 --quick-geglu --glu-linear-offset 1.0 --softmax-type learnable
  --window-attn-skip-freq 2 --enable-gpt-oss --activation-func-clamp-value 7.0 --window-size 7,0)
run modelopt_gpt_oss_20b 2 train "${gpt_oss[@]}" "${modelopt_train[@]}" --tensor-model-parallel-size 2 \
  --expert-tensor-parallel-size 1

# examples/gptoss/02_train.sh: its MODEL_ARGS, MOE_ARGS, mock DATA_ARGS_LIST, TRAINING_ARGS,
# MODEL_PARALLEL_ARGS and LOGGING_ARGS in the order of its command; TP1 EP1 and PP = world size as
# the script sets them (PP2 on 2 ranks, 12 layers → 4), the window 127,0 scaled to 7,0 with the
# sequence 8192 → 32, so that it binds. Its --enable-gpt-oss gives GPT-OSS's YaRN (Megatron applies
# it in its ModelOpt builder). As written it stops at its fp8 recipe; without the fp8 flags it trains.
gptoss_02=(--no-masked-softmax-fusion --transformer-impl transformer_engine --disable-bias-linear
  --untie-embeddings-and-output-weights --no-rope-fusion --normalization RMSNorm --num-layers 4 --hidden-size 64
  --ffn-hidden-size 64 --num-attention-heads 8 --group-query-attention --num-query-groups 2 --seq-length 32
  --max-position-embeddings 32 --use-mcore-models --rotary-percent 1.0 --rope-type rope --position-embedding-type rope
  --rotary-base 10000 --no-bias-gelu-fusion --export-force-local-attention --no-bias-dropout-fusion --quick-geglu
  --glu-linear-offset 1.0 --softmax-type learnable --window-attn-skip-freq 2 --activation-func-clamp-value 7.0
  --window-size 7,0 --enable-gpt-oss
  --num-experts 4 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-3
  --moe-grouped-gemm --moe-token-dispatcher-type alltoall --overlap-param-gather --overlap-grad-reduce
  --moe-ffn-hidden-size 64 --moe-router-dtype fp32 --moe-z-loss-coeff 1e-3 --moe-permute-fusion
  --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --data-cache-path "$work/gptoss_cache"
  --tiktoken-pattern v2 --split '99,1,0' --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1
  --micro-batch-size 1 --global-batch-size 4 --lr 1.0e-5 --train-samples 8 --lr-decay-samples 8
  --lr-decay-style cosine --min-lr 1.0e-6 --weight-decay 0.1 --lr-warmup-fraction 0.05 --clip-grad 1.0 --bf16
  --use-flash-attn --attention-softmax-in-fp32 --accumulate-allreduce-grads-in-fp32
  --disable-bf16-reduced-precision-matmul --recompute-activations
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --expert-model-parallel-size 1 --sequence-parallel
  --context-parallel-size 1 --use-distributed-optimizer)
gptoss_02_log=(--log-interval 1 --save-interval 10000 --eval-interval 50000000 --eval-iters 0
  --save "$work/gptoss_ckpt" --tensorboard-dir "$work/gptoss_ckpt/tensorboard" --moe-per-layer-logging --no-load-optim
  --no-load-rng --log-throughput)
run gptoss_02_train_fp8 2 refused "${gptoss_02[@]}" --fp8-format hybrid --fp8-param-gather --fp8-amax-compute-algo max \
  --fp8-amax-history-len 1024 "${gptoss_02_log[@]}"
run gptoss_02_train_bf16 2 train "${gptoss_02[@]}" "${gptoss_02_log[@]}"

# examples/rl/model_configs: each file's MODEL_OPTIONS, then common.sh's COMMON_OPTIONS, then the
# batch sizes of its ENV_DEPENDENT, in the order of the train_rl.py command of examples/rl/README.md,
# sizes scaled down, after a few of that command's own flags (rl_launch: it trains on --mock-data
# for a number of samples, with --sequence-parallel, which MoE layers under TP need in Megatron as
# in Strata; no evaluation here). Left out as RL-specific:
# the GRPO flags and --langrl-env-config of ENV_DEPENDENT, the --rl-* flags, the rollout inference
# engine's --inference-* flags (and nemotron6_3b_moe's --decode-only-cuda-graphs and
# --moe-pad-experts-for-cuda-graph-inference), nemotron5_56b's sampling --model-temperature,
# RUN_REQUEST_ARGS (the arguments of the rollout request, not of train_rl.py), and
# --pretrained-checkpoint $CHECKPOINT (the converted model RL starts from: these runs start from
# random weights). The tokenizer flags (--tokenizer-type, --tokenizer-model, --vocab-size, and
# qwen3_30b_a3b_moe's --tokenizer-hf-include-special-tokens, a flag Megatron does not define) and
# nemotron5_56b's --per-split-data-args-path are replaced by the mock data.
rl_launch=(--train-samples 8 --log-interval 1 --eval-iters 0 --sequence-parallel)
# common.sh as the files source it (bf16, CUDA graphs on; its --inference-dynamic-batching-* and
# --rl-persist-cuda-graphs left out) trains: --data-parallel-random-init is accepted (it changes
# nothing in Strata, docs/megatron_flags.md) and --save-retain-interval without --save has no
# effect, as in Megatron; shown here on qwen_2p5_3b's model, and left out of the cases below.
rl_common_as_written() {  # TP PP
  rl_common=(--tensor-model-parallel-size "$1" --pipeline-model-parallel-size "$2" --use-mcore-models
    --transformer-impl transformer_engine --bf16 --te-rng-tracker --data-parallel-random-init
    --attention-backend flash --timing-log-level 1 --log-timers-to-tensorboard --save-retain-interval 160
    --adam-beta1 0.9 --adam-beta2 0.95 --adam-eps 1e-8 --cuda-graph-impl=local)
}
# common.sh without --data-parallel-random-init and --save-retain-interval; LOWER_PRECISION=true
# (nemotron5p5_12b_H) adds --no-gradient-accumulation-fusion and turns the CUDA graphs off.
rl_common_kept() {  # TP PP [lower]
  rl_common=(--tensor-model-parallel-size "$1" --pipeline-model-parallel-size "$2" --use-mcore-models
    --transformer-impl transformer_engine --bf16 --te-rng-tracker --attention-backend flash --timing-log-level 1
    --log-timers-to-tensorboard --adam-beta1 0.9 --adam-beta2 0.95 --adam-eps 1e-8)
  if [[ ${3:-} == lower ]]; then
    rl_common+=(--no-gradient-accumulation-fusion)
  else
    rl_common+=(--cuda-graph-impl=local)
  fi
}
rl_env=(--micro-batch-size 1 --global-batch-size 4)
# qwen_2p5_3b.sh: TP2.
rl_qwen25_3b=(--calculate-per-token-loss --ckpt-format torch_dist --seq-length 32 --disable-bias-linear --add-qkv-bias
  --normalization RMSNorm --norm-epsilon 1e-6 --group-query-attention --num-query-groups 2 --no-masked-softmax-fusion
  --attention-softmax-in-fp32 --attention-dropout 0.0 --hidden-dropout 0.0 --weight-decay 0.0
  --position-embedding-type rope --rotary-percent 1.0 --rotary-base 1000000 --use-rotary-position-embeddings
  --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 352 --num-attention-heads 4
  --max-position-embeddings 256 "${mock[@]}" --lr 0.000001 --lr-warmup-samples 0 --make-vocab-size-divisible-by 64
  --clip-grad 1.0)
rl_common_as_written 2 1
run rl_common 2 train "${rl_launch[@]}" "${rl_qwen25_3b[@]}" "${rl_common[@]}" "${rl_env[@]}"
rl_common_kept 2 1
run rl_qwen_2p5_3b 2 train "${rl_launch[@]}" "${rl_qwen25_3b[@]}" "${rl_common[@]}" "${rl_env[@]}"
# llama3p1_8b_instruct.sh: TP8 → TP2.
rl_llama31=(--disable-bias-linear --ckpt-format torch_dist --seq-length 32 --add-qkv-bias --normalization RMSNorm
  --group-query-attention --num-query-groups 2 --no-masked-softmax-fusion --attention-softmax-in-fp32
  --attention-dropout 0.0 --hidden-dropout 0.0 --untie-embeddings-and-output-weights --weight-decay 0.1
  --position-embedding-type rope --rotary-percent 1.0 --rotary-base 500000 --use-rotary-position-embeddings --swiglu
  --num-layers 2 --hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 4 --max-position-embeddings 2048
  "${mock[@]}" --lr 3e-7 --make-vocab-size-divisible-by 128 --clip-grad 1.0)
rl_common_kept 2 1
run rl_llama3p1_8b_instruct 2 train "${rl_launch[@]}" "${rl_llama31[@]}" "${rl_common[@]}" "${rl_env[@]}"
# nemotron5_56b.sh: TP8 → TP2; refused at --fp8-format (then --fp8-amax-history-len,
# --fp8-amax-compute-algo, --fp8-interval, --fp8-margin, --fp8-recipe). Its two --seq-length (12000, then 8191).
rl_nemotron5_56b=(--calculate-per-token-loss --seq-length 48 --fp8-format hybrid --fp8-amax-history-len 1
  --fp8-amax-compute-algo max --fp8-interval 1 --fp8-margin 0 --first-last-layers-bf16 --fp8-recipe tensorwise
  --hybrid-layer-pattern "M-M*-" --spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec
  --mamba-state-dim 16 --tiktoken-pattern v2 --distributed-timeout-minutes 60 --use-mcore-models --no-mmap-bin-files
  --sequence-parallel --untie-embeddings-and-output-weights --disable-bias-linear --init-method-std 0.0099
  --position-embedding-type none --squared-relu --hidden-size 64 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --ffn-hidden-size 256 --kv-channels 16 --normalization RMSNorm --attention-dropout 0.0
  --hidden-dropout 0.0 --exit-duration-in-mins 5750 --seq-length 31 --max-position-embeddings 32
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --no-masked-softmax-fusion
  --attention-softmax-in-fp32 --weight-decay 0.1 --clip-grad 1.0 "${mock[@]}" --position-embedding-type none
  --dist-ckpt-strictness log_unexpected --ckpt-format torch_dist --ckpt-fully-parallel-save
  --ckpt-fully-parallel-load --async-save --ckpt-assume-constant-structure --log-progress --timing-log-option minmax
  --log-params-norm --log-num-zeros-in-grad --log-throughput --use-distributed-optimizer --overlap-grad-reduce
  --overlap-param-gather --no-create-attention-mask-in-dataloader --lr 1e-6 --lr-warmup-samples 0)
rl_common_kept 2 1
run rl_nemotron5_56b 2 refused "${rl_launch[@]}" "${rl_nemotron5_56b[@]}" "${rl_common[@]}" "${rl_env[@]}"
# nemotron5_8b.sh: TP8 → TP2 (its default Mamba head dim 64 scaled to 16 with the hidden size, so
# that the 8 groups divide the heads). Its second --seq-length, 8191 (here 31), is odd: under
# --sequence-parallel Megatron fails at the first scatter of the sequence over tp
# (tensor_parallel/mappings.py _split_along_first_dim: "First dimension of the tensor should be
# divisible by tensor parallel size"); Strata refuses it in the config.
rl_nemotron5_8b=(--calculate-per-token-loss --seq-length 48 --hybrid-layer-pattern "M-M*-" --mamba-head-dim 16
  --spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec --tiktoken-pattern v2
  --distributed-timeout-minutes 60 --use-mcore-models --no-mmap-bin-files --untie-embeddings-and-output-weights
  --disable-bias-linear --normalization RMSNorm --norm-epsilon 1e-5 --init-method-std 0.014
  --position-embedding-type none --squared-relu --hidden-size 64 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --ffn-hidden-size 336 --kv-channels 16 --normalization RMSNorm --attention-dropout 0.0
  --hidden-dropout 0.0 --exit-duration-in-mins 5750 --seq-length 31 --max-position-embeddings 32
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --no-masked-softmax-fusion
  --attention-softmax-in-fp32 --weight-decay 0.1 --clip-grad 1.0 "${mock[@]}"
  --no-use-tokenizer-model-from-checkpoint-args --position-embedding-type none --dist-ckpt-strictness log_unexpected
  --ckpt-format torch_dist --ckpt-fully-parallel-save --ckpt-fully-parallel-load --use-distributed-optimizer
  --overlap-grad-reduce --overlap-param-gather --no-create-attention-mask-in-dataloader --lr 1e-6
  --lr-warmup-samples 0)
rl_common_kept 2 1
run rl_nemotron5_8b 2 "model.seq_length: 31 is not divisible by parallel.tensor_model_parallel_size (2)" "${rl_launch[@]}" "${rl_nemotron5_8b[@]}" "${rl_common[@]}" "${rl_env[@]}"
# nemotron5p5_12b_H.sh: TP4 → TP2, LOWER_PRECISION=true; refused at --fp8-recipe (then --fp8-format,
# --fp8-param-gather; its --log-progress, --log-straggler, --disable-straggler-on-startup,
# --straggler-minmax-count and --check-weight-hash-across-dp-replicas-interval are implemented).
rl_nemotron5p5_12b=(--calculate-per-token-loss --seq-length 48 --fp8-recipe blockwise --fp8-format e4m3
  --first-last-layers-bf16 --num-layers-at-start-in-bf16 1 --num-layers-at-end-in-bf16 1 --fp8-param-gather
  --disable-gloo-process-groups --mamba-head-dim 16 --hybrid-layer-pattern "M-M*-"
  --spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec --tiktoken-pattern v2
  --distributed-timeout-minutes 10 --use-mcore-models --no-mmap-bin-files --untie-embeddings-and-output-weights
  --disable-bias-linear --normalization RMSNorm --norm-epsilon 1e-5 --init-method-std 0.0125
  --position-embedding-type none --squared-relu --hidden-size 64 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --ffn-hidden-size 256 --kv-channels 16 --normalization RMSNorm --attention-dropout 0.0
  --hidden-dropout 0.0 --exit-duration-in-mins 5750 --seq-length 31 --max-position-embeddings 32
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --no-masked-softmax-fusion
  --attention-softmax-in-fp32 --lr 4.5e-6 --min-lr 4.5e-7 --weight-decay 0.1 --clip-grad 1.0 "${mock[@]}"
  --save-interval 2000 --ckpt-format torch_dist --ckpt-fully-parallel-save --ckpt-fully-parallel-load
  --ckpt-assume-constant-structure --log-progress --timing-log-option minmax --log-params-norm
  --log-num-zeros-in-grad --log-throughput --bf16 --adam-beta1 0.9 --adam-beta2 0.95 --use-distributed-optimizer
  --ddp-num-buckets 5 --overlap-grad-reduce --overlap-param-gather --no-create-attention-mask-in-dataloader
  --manual-gc --num-workers 1 --log-straggler --disable-straggler-on-startup --straggler-minmax-count 16
  --check-weight-hash-across-dp-replicas-interval 20000 --rerun-mode disabled)
rl_common_kept 2 1 lower
run rl_nemotron5p5_12b_h 2 refused "${rl_launch[@]}" "${rl_nemotron5p5_12b[@]}" "${rl_common[@]}" "${rl_env[@]}"
# nemotron6_3b_moe.sh: TP2, EP32 → EP2. It has no architecture flags: --use-checkpoint-args takes them
# from the checkpoint it loads. So first a small hybrid Mamba/attention/MoE checkpoint of its kind is
# trained and saved (1 step), then the script's flags resume from it (--dist-ckpt-strictness
# log_unexpected, --no-load-optim, --no-load-rng).
nemotron6_pretrained=(--hybrid-layer-pattern "M*E" --hidden-size 64 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --mamba-num-heads 8 --mamba-head-dim 16 --num-experts 4 --moe-router-topk 2
  --moe-ffn-hidden-size 32 --moe-router-score-function sigmoid --moe-router-enable-expert-bias
  --position-embedding-type none --normalization RMSNorm --disable-bias-linear --bf16 --seq-length 32
  --max-position-embeddings 32 --tensor-model-parallel-size 2 --expert-model-parallel-size 2 "${mock[@]}"
  --micro-batch-size 1 --global-batch-size 4 --lr 1e-4 --save "$work/nemotron6_ckpt")
run rl_nemotron6_3b_moe_pretrained 4 train --train-samples 4 --log-interval 1 --eval-iters 0 --sequence-parallel \
  "${nemotron6_pretrained[@]}"
rl_nemotron6_3b_moe=(--no-use-tokenizer-model-from-checkpoint-args --cuda-graph-impl local --use-checkpoint-args
  --enable-experimental --cross-entropy-loss-fusion --cross-entropy-fusion-impl native --moe-aux-loss-coeff 0.0
  --moe-router-dtype fp64 --moe-router-load-balancing-type aux_loss --moe-router-score-function sigmoid
  --moe-token-dispatcher-type alltoall --moe-router-enable-expert-bias --moe-router-topk-scaling-factor 2.5
  --disable-gloo-process-groups --seq-length 32 --distributed-timeout-minutes 60 --use-mcore-models
  --no-mmap-bin-files --disable-bias-linear --norm-epsilon 1e-5 --init-method-std 0.014 --exit-duration-in-mins 5750
  --max-position-embeddings 32 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1
  --expert-model-parallel-size 2 --expert-tensor-parallel-size 1 --weight-decay 0.01 --clip-grad 1.0
  --tiktoken-pattern v2 "${mock[@]}" --dist-ckpt-strictness log_unexpected --ckpt-format torch_dist
  --ckpt-fully-parallel-save --ckpt-fully-parallel-load --use-distributed-optimizer --overlap-grad-reduce
  --overlap-param-gather --no-create-attention-mask-in-dataloader --lr 3e-6 --min-lr 3e-6 --lr-decay-style constant
  --lr-warmup-samples 4 --lr-warmup-init 0.3e-7 --no-load-optim --no-load-rng --load "$work/nemotron6_ckpt")
rl_common_kept 2 1
run rl_nemotron6_3b_moe 4 train "${rl_launch[@]}" "${rl_nemotron6_3b_moe[@]}" "${rl_common[@]}" "${rl_env[@]}"
# qwen3_30b_a3b_moe.sh: TP4 → TP2, EP2.
rl_qwen3_30b_a3b() {  # the flags with --dist-ckpt-strictness log_unexpected as $1 (or nothing)
  rl_model=(--seq-length 32 --no-use-tokenizer-model-from-checkpoint-args --bf16 --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 1 --expert-model-parallel-size 2 --attention-backend flash
    --transformer-impl transformer_engine --te-rng-tracker "${mock[@]}" --untie-embeddings-and-output-weights
    --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 4 --kv-channels 32
    --max-position-embeddings 64 --group-query-attention --num-query-groups 2 --normalization RMSNorm
    --norm-epsilon 1e-6 --position-embedding-type rope --rotary-percent 1.0 --rotary-base 1000000
    --use-rotary-position-embeddings --swiglu --disable-bias-linear --num-experts 4 --moe-router-topk 2
    --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 0.001 --moe-router-load-balancing-type aux_loss
    --attention-dropout 0.0 --hidden-dropout 0.0 --no-masked-softmax-fusion --attention-softmax-in-fp32
    --make-vocab-size-divisible-by 128 "$@" --qk-layernorm --moe-token-dispatcher-type alltoall --moe-layer-freq 1
    --optimizer adam --adam-beta1 0.9 --adam-beta2 0.999 --adam-eps 1e-8 --lr 1e-6 --min-lr 1e-7
    --lr-warmup-samples 0 --clip-grad 1.0 --weight-decay 0.01 --no-load-optim --ckpt-format torch_dist)
}
rl_common_kept 2 1
rl_qwen3_30b_a3b --dist-ckpt-strictness log_unexpected
run rl_qwen3_30b_a3b_moe 4 train "${rl_launch[@]}" "${rl_model[@]}" "${rl_common[@]}" "${rl_env[@]}"
# qwen3_32b.sh (TP4 → TP2), qwen3_8b.sh (TP1) and qwen3_4b.sh (TP1, tied embeddings): the same
# flags but for the sizes and --untie-embeddings-and-output-weights.
rl_qwen3() {  # TP [--untie-embeddings-and-output-weights]
  rl_model=(--ckpt-format torch_dist --seq-length 32 "${@:2}" --num-layers 2 --hidden-size 64 --ffn-hidden-size 320
    --num-attention-heads 4 --kv-channels 32 --max-position-embeddings 320 --group-query-attention
    --num-query-groups 2 --normalization RMSNorm --norm-epsilon 1e-6 --qk-layernorm --position-embedding-type rope
    --rotary-percent 1.0 --rotary-base 1000000 --use-rotary-position-embeddings --swiglu --disable-bias-linear
    --attention-dropout 0.0 --hidden-dropout 0.0 --no-masked-softmax-fusion --attention-softmax-in-fp32
    "${mock[@]}" --make-vocab-size-divisible-by 128 --optimizer adam --adam-beta1 0.9 --adam-beta2 0.999
    --adam-eps 1e-8 --lr 1e-6 --min-lr 1e-7 --lr-warmup-samples 0 --clip-grad 1.0 --weight-decay 0.01
    --recompute-granularity selective --recompute-activations --recompute-modules core_attn)
  rl_common_kept "$1" 1
}
rl_qwen3 2 --untie-embeddings-and-output-weights
run rl_qwen3_32b 2 train "${rl_launch[@]}" "${rl_model[@]}" "${rl_common[@]}" "${rl_env[@]}"
rl_qwen3 1 --untie-embeddings-and-output-weights
run rl_qwen3_8b 2 train "${rl_launch[@]}" "${rl_model[@]}" "${rl_common[@]}" "${rl_env[@]}"
rl_qwen3 1
run rl_qwen3_4b 2 train "${rl_launch[@]}" "${rl_model[@]}" "${rl_common[@]}" "${rl_env[@]}"
# qwen_2p5_32b.sh (TP8 → TP2, with selective recomputation), qwen_2p5_distill_7b.sh (TP2,
# --ckpt-format torch) and qwen_2p5_math_7b.sh (TP1, --ckpt-format torch).
rl_qwen25() {  # TP CKPT_FORMAT NORM_EPS ROTARY_BASE [recompute flags]
  rl_model=(--calculate-per-token-loss --ckpt-format "$2" --seq-length 32 --untie-embeddings-and-output-weights
    --disable-bias-linear --add-qkv-bias --normalization RMSNorm --norm-epsilon "$3" --group-query-attention
    --num-query-groups 2 --no-masked-softmax-fusion --attention-softmax-in-fp32 --attention-dropout 0.0
    --hidden-dropout 0.0 --weight-decay 0.0 --position-embedding-type rope --rotary-percent 1.0 --rotary-base "$4"
    --use-rotary-position-embeddings --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 320
    --num-attention-heads 4 --max-position-embeddings 1024 "${mock[@]}" --lr 1e-6 --lr-warmup-samples 0
    --make-vocab-size-divisible-by 128 --clip-grad 1.0 "${@:5}")
  rl_common_kept "$1" 1
}
rl_qwen25 2 torch_dist 1e-5 1000000 --recompute-granularity selective --recompute-activations
run rl_qwen_2p5_32b 2 train "${rl_launch[@]}" "${rl_model[@]}" "${rl_common[@]}" "${rl_env[@]}"
rl_qwen25 2 torch 1e-6 10000
run rl_qwen_2p5_distill_7b 2 train "${rl_launch[@]}" "${rl_model[@]}" "${rl_common[@]}" "${rl_env[@]}"
rl_qwen25 1 torch 1e-6 10000
run rl_qwen_2p5_math_7b 2 train "${rl_launch[@]}" "${rl_model[@]}" "${rl_common[@]}" "${rl_env[@]}"

# examples/academic_paper_scripts/sc21: run_figure_11..18.sh and run_table_1.sh set sizes and
# layouts (TP, PP, MBS, GBS, NLS, HS, NAH, DDP) and MEGATRON_EXTRA_PARAMS for CONFIG.sh's one
# pretrain_gpt.py argument list; they differ only in those, so three cases cover them (TP8 → TP2,
# PP → 2, 4 layers). Every script passes --DDP-impl (CONFIG.sh), and all but run_figure_17.sh with
# ACTIVATION_RECOMPUTATION=NO pass --activations-checkpoint-method uniform: Megatron-LM has dropped
# both flags since (now --recompute-method with --recompute-granularity full; Megatron's own DDP),
# and it refuses them as unrecognized arguments, as Strata does (the first case). The other two
# cases leave them out: the interleaved schedule of run_table_1.sh (76B to 530B),
# run_figure_12.sh (INTERLEAVED=YES) and run_figure_18.sh is refused at
# --num-layers-per-virtual-pipeline-stage; the others train (fp16, static loss scale).
sc21() {  # TP PP MBS GBS NLS HS NAH
  sc21_args=(--tensor-model-parallel-size "$1" --pipeline-model-parallel-size "$2" --micro-batch-size "$3"
    --global-batch-size "$4" --num-layers "$5" --hidden-size "$6" --num-attention-heads "$7" "${mock[@]}"
    --log-interval 1 --seq-length 32 --max-position-embeddings 32 --train-iters 3 --lr-decay-iters 2 --lr 0.0001
    --min-lr 0.00001 --lr-decay-style cosine --lr-warmup-fraction 0.01 --split 969,30,1 --eval-iters 1
    --eval-interval 1000 --clip-grad 1.0 --fp16 --loss-scale 8192)
}
sc21 2 2 1 4 4 64 4
run sc21_as_written 4 "unknown flag '--activations-checkpoint-method'" --activations-checkpoint-method uniform \
  "${sc21_args[@]:0:14}" --DDP-impl torch "${sc21_args[@]:14}"
run sc21_interleaved 4 refused --num-layers-per-virtual-pipeline-stage 1 "${sc21_args[@]}"
run sc21 4 train "${sc21_args[@]}"

exit $fail
