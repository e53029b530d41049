#!/usr/bin/python3
"""Synthetic router trace for the concentration benchmark (docs/performance.md).

    gen_routing_trace.py OUT_DIR [--gib 1.05] [--ranks 2] [--layers 8] [--tokens 4096]
                         [--topk 8] [--experts 256] [--seed 0]

Writes router_trace_rank<R>.jsonl in Megatron's spelling (json.dumps spacing, Strata's
micro_batch / phase after top_indices) until the files hold --gib GiB together. Routing is
Zipf-skewed per layer; each layer draws its top_indices from a pool of 8 pre-formatted [T][k]
blocks so that writing a GiB takes seconds, not minutes.
"""
import argparse
import json
import os

import numpy as np


def pools(rng, layers, T, k, E):
    out = []
    for layer in range(layers):
        w = 1.0 / np.arange(1, E + 1) ** (0.3 + 0.1 * layer)
        w = w[rng.permutation(E)]
        blocks = []
        for _ in range(8):
            keys = rng.random((T, E)) ** (1.0 / w)  # weighted sampling without replacement
            top = np.argsort(-keys, axis=1)[:, :k]
            blocks.append(json.dumps(top.tolist()))
        out.append(blocks)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--gib", type=float, default=1.05)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    pool = pools(rng, a.layers, a.tokens, a.topk, a.experts)
    os.makedirs(a.out_dir, exist_ok=True)
    files = [open(os.path.join(a.out_dir, "router_trace_rank%d.jsonl" % r), "w") for r in range(a.ranks)]
    total, step, target = 0, 0, int(a.gib * 2 ** 30)
    while total < target:
        for r, f in enumerate(files):
            for layer in range(a.layers):
                head = json.dumps({"step": step, "stage": "pre_dispatch", "block": "decoder", "layer": layer,
                                   "rank": r, "num_tokens": a.tokens, "topk": a.topk})
                line = '%s, "top_indices": %s, "micro_batch": 0, "phase": "train"}\n' % (
                    head[:-1], pool[layer][int(rng.integers(8))])
                f.write(line)
                total += len(line)
        step += 1
    for f in files:
        f.close()
    print("wrote %d bytes, %d steps x %d ranks x %d layers" % (total, step, a.ranks, a.layers))


if __name__ == "__main__":
    main()
