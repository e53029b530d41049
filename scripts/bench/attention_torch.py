#!/usr/bin/env python3
"""Reference for `strata bench ops` attention numbers: PyTorch scaled_dot_product_attention
(flash backend) forward and forward+backward on the same shape, timed with CUDA events (median).
Run by scripts/gpu_check.sh on the GPU machine; prints one JSON object per line."""
import json
import sys

import torch


def median_ms(fn, warmup=3, iters=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA in torch"}))
        return 0
    b, s, h, d = 2, 4096, 32, 128
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    fwd_flops = 4.0 * b * h * s * s * d / 2
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        f = median_ms(lambda: sdpa(q, k, v, is_causal=True))
        def fb():
            o = sdpa(q, k, v, is_causal=True)
            o.backward(dout)
        fbm = median_ms(fb)
    shape = f"b{b} s{s} h{h} d{d} bf16 causal"
    print(json.dumps({"op": "attention_fwd", "ref": "torch sdpa flash", "shape": shape, "ms": f,
                      "tflops": fwd_flops / f / 1e9}))
    print(json.dumps({"op": "attention_fwd_bwd", "ref": "torch sdpa flash", "shape": shape, "ms": fbm,
                      "tflops": 3.5 * fwd_flops / fbm / 1e9}))
    n = 8192
    x, y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16), torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    g = median_ms(lambda: x @ y)
    print(json.dumps({"op": "gemm", "ref": "torch matmul", "shape": f"{n}^3 bf16", "ms": g,
                      "tflops": 2.0 * n ** 3 / g / 1e9}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
