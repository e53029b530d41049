#!/usr/bin/env bash
# The one device check for a session that has a GPU. Run it through the device tool from the repo
# root, after scripts/gpu_bundle.sh here:   device run --carry gpu_bundle "bash scripts/gpu_check.sh"
# Steps (each logged under $OUT, a summary table printed last):
#   1. device report (nvidia-smi)
#   2. binaries: the carried gpu_bundle/ (built here for sm_90), else a build there for sm_90
#   3. op sweep: every op x dtype x shape on CUDA against the float64 CPU reference
#   4. GPU unit tests, the single-GPU NCCL communicator test ([nccl]), then the CPU unit tests on
#      that machine
#   5. op benchmarks (GEMM vs cublasLtMatmul at 8192^3, attention fwd+bwd at s=4096 d=128, memory-
#      bound ops vs device copy) and the PyTorch reference on the same shapes; a single-GPU
#      training-step benchmark (strata bench train on cuda vs PyTorch eager, GPT-2-small shape)
#   6. mHC's step-time cost on one GPU (strata bench recompute, mHC vs the same GPT without it,
#      unfused and fused mHC ops, with and without selective mhc recompute)
#   7. packed-sequence attention (strata bench packed: 8 documents in s 8192, bf16, against one
#      document and the sum(doc_len^2)/seq_len^2 bound)
#   8. compute-sanitizer memcheck over the quick sweep
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$root/out}"
mkdir -p "$OUT"
cd "$root"
summary=()
note() { summary+=("$(printf '%-28s %s' "$1" "$2")"); }

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 && note "device" "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"

if [[ -x gpu_bundle/bin/strata ]]; then
  bin="$root/gpu_bundle/bin"
  export LD_LIBRARY_PATH="$root/gpu_bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  note "binaries" "carried gpu_bundle (built for sm_90)"
else
  STRATA_CUDA=ON CUDA_ARCHS=90 BUILD_JOBS=16 bash scripts/build.sh "$root/build-gpu" > "$OUT/build.log" 2>&1 \
    && note "binaries" "built there" || { note "binaries" "BUILD FAILED (see build.log)"; printf '%s\n' "${summary[@]}"; exit 1; }
  bin="$root/build-gpu"
  cp "$bin/tests/strata_unit_tests" "$bin/tests/strata_gpu_tests" "$bin/" 2>/dev/null || true
fi

timeout 240 "$bin/strata_op_sweep" --backend cuda --json "$OUT/sweep.json" > "$OUT/sweep.log" 2>&1
rc=$?; note "op sweep (cuda vs f64 cpu)" "rc=$rc $(tail -1 "$OUT/sweep.log")"
grep -E " FAIL" "$OUT/sweep.log" | head -20 > "$OUT/sweep_failures.txt"

timeout 120 "$bin/strata_gpu_tests" > "$OUT/gpu_tests.log" 2>&1
rc=$?; note "gpu unit tests" "rc=$rc $(grep -E 'test cases|All tests' "$OUT/gpu_tests.log" | tail -1)"
# The NCCL communicator on one GPU (tests/gpu/test_nccl_communicator_gpu.cpp): blocking and
# asynchronous (communication-stream) collectives against host values; also part of the run above.
timeout 60 "$bin/strata_gpu_tests" "[nccl]" > "$OUT/gpu_nccl.log" 2>&1
rc=$?; note "nccl 1-rank communicator" "rc=$rc $(grep -E 'test cases|All tests' "$OUT/gpu_nccl.log" | tail -1)"
timeout 120 "$bin/strata_unit_tests" > "$OUT/unit_tests.log" 2>&1
rc=$?; note "cpu unit tests (there)" "rc=$rc $(grep -E 'test cases|All tests' "$OUT/unit_tests.log" | tail -1)"

timeout 180 "$bin/strata" bench ops --bench-json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
rc=$?; note "op benchmarks" "rc=$rc (bench.log)"
timeout 120 python3 scripts/bench/attention_torch.py > "$OUT/torch_reference.jsonl" 2>&1
note "torch reference" "rc=$? (torch_reference.jsonl)"
# Single-GPU training step (issue 4): a GPT-2-small-shaped model (12 layers, hidden 768, seq 1024,
# batch 8, fp32, no dropout) in Strata's trainer and in PyTorch eager on the same GPU, alternated.
timeout 240 "$bin/strata" bench train --config configs/bench_gpt_cpu.yaml training.device=cuda \
  model.num_layers=12 model.hidden_size=768 model.num_attention_heads=12 model.seq_length=1024 \
  model.max_position_embeddings=1024 training.micro_batch_size=8 training.global_batch_size=8 \
  --iters 10 --warmup 3 --repeat 2 --reference torch --python "$(command -v python3)" \
  --json "$OUT/bench_train_gpu.json" > "$OUT/bench_train_gpu.log" 2>&1
note "bench train (1 GPU vs torch)" "rc=$? $(grep -E 'ratio|median' "$OUT/bench_train_gpu.log" | tail -1)"

# mHC's step-time cost (issue 15: <= 10 % with the fused kernels): the same 8-layer bf16 GPT with and
# without 4 residual streams, alternated, unfused (default) and fused; plus selective mhc recompute.
for path in unfused fused; do
  extra=(); [[ $path == fused ]] && extra=(model.use_fused_mhc=true)
  timeout 120 "$bin/strata" bench recompute --config configs/bench_gpt_mhc_gpu.yaml \
    --compare-config configs/bench_gpt_gpu_ref.yaml --modes none selective:mhc --iters 4 --warmup 2 --repeat 1 \
    --json "$OUT/bench_mhc_gpu_$path.json" "${extra[@]}" > "$OUT/bench_mhc_gpu_$path.log" 2>&1
  note "bench mhc ($path) vs plain" "rc=$? $(grep -E 'ratio, median' "$OUT/bench_mhc_gpu_$path.log" | tail -1)"
done

timeout 60 "$bin/strata" bench packed --device cuda --dtype bf16 --seq 8192 --heads 16 --kv-heads 4 --head-dim 128 \
  --json "$OUT/bench_packed_gpu.json" > "$OUT/bench_packed_gpu.log" 2>&1
note "bench packed (8 documents vs one)" "rc=$? $(grep -E 'time ratio' "$OUT/bench_packed_gpu.log" | tail -1)"

if command -v compute-sanitizer > /dev/null; then
  timeout 150 compute-sanitizer --tool memcheck --print-limit 20 "$bin/strata_op_sweep" --quick --backend cuda \
    > "$OUT/memcheck.log" 2>&1
  note "memcheck (quick sweep)" "rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
fi

echo "==== benchmarks ===="
grep -vE "^\[" "$OUT/bench.log" | tail -20
cat "$OUT/torch_reference.jsonl"
grep -vE "^\[" "$OUT/bench_train_gpu.log" | tail -8
for path in unfused fused; do grep -vE "^\[|repeat" "$OUT/bench_mhc_gpu_$path.log" | tail -6; done
grep -vE "^\[" "$OUT/bench_packed_gpu.log" | tail -5
echo "==== sweep failures (first 20) ===="
cat "$OUT/sweep_failures.txt"
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
