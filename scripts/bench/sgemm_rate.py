"""The machine's SGEMM rate as PyTorch eager sees it: torch.matmul on f32 matrices.

    python3 scripts/bench/sgemm_rate.py --threads 2 [--sizes 1024,2048] [--shapes-file F] [--repeats 10]

--shapes-file: a JSON list of [batch, m, n, k, transpose_a, transpose_b, broadcast_a, broadcast_b,
count] rows (`strata bench train` writes one step's GEMMs so); each distinct shape is timed with the
same transposes and broadcasts, and the step's rate is its total FLOPs over the summed times.
Prints one line per size, then a JSON object on the last line. Random inputs (zeros can run
faster), one warm-up product, the median of the repeats.
"""
import argparse
import json
import statistics
import time

import torch


def seconds(batch, m, n, k, ta, tb, ba, bb, repeats):
    """Median seconds of C = op(A) op(B), stored as strata stores them (transposes as views)."""
    def operand(rows, cols, transposed, broadcast):
        lead = [] if broadcast or batch == 1 else [batch]
        t = torch.randn(*lead, cols, rows) if transposed else torch.randn(*lead, rows, cols)
        return t.transpose(-1, -2) if transposed else t
    a, b = operand(m, k, ta, ba), operand(k, n, tb, bb)
    out = torch.empty(*([batch] if batch > 1 else []), m, n)
    torch.matmul(a, b, out=out)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        torch.matmul(a, b, out=out)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--shapes-file")
    ap.add_argument("--repeats", type=int, default=10)
    opts = ap.parse_args()
    torch.set_num_threads(opts.threads)
    result = {"torch": torch.__version__, "threads": opts.threads, "sizes": {}}
    for n in (int(x) for x in opts.sizes.split(",")):
        result["sizes"][n] = 2.0 * n ** 3 / seconds(1, n, n, n, False, False, False, False, opts.repeats) / 1e9
        print(f"torch.matmul {n}^3 f32, {opts.threads} threads: {result['sizes'][n]:.1f} GFLOP/s", flush=True)
    result["gflops"] = max(result["sizes"].values())
    if opts.shapes_file:
        with open(opts.shapes_file) as f:
            rows = json.load(f)
        flop = total = 0.0
        gemms = 0
        for batch, m, n, k, ta, tb, ba, bb, count in rows:
            total += count * seconds(batch, m, n, k, ta, tb, ba, bb, opts.repeats)
            flop += count * 2.0 * batch * m * n * k
            gemms += count
        result.update(step_gemms=gemms, step_gflop=flop / 1e9, step_gflops=flop / total / 1e9)
        print(f"torch.matmul on the step's {gemms} GEMMs ({flop / 1e9:.2f} GFLOP): "
              f"{result['step_gflops']:.1f} GFLOP/s", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
