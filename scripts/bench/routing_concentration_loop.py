#!/usr/bin/python3
"""Reference for the concentration benchmark: a plain per-record Python loop over json.loads.

    routing_concentration_loop.py TRACE_DIR [--output-dir D] [--decode-only] [--n-values ...]

The approach of Megatron-LM's tools/moe_routing/analyze_routing_concentration.py (json.loads per
line, a Counter incremented per (token, slot)), one pass, with per-(rank, step, layer) Counters
instead of the records so that memory stays bounded too. Writes the two CSVs of
scripts/moe_routing/concentration.py (concentration_per_layer.csv, expert_frequencies_per_layer.csv)
byte for byte, so the results can be compared; no table, no plots. docs/performance.md.
"""
import argparse
import glob
import json
import os
from collections import Counter, defaultdict


def label(lk):
    return "d:%d" % lk[2] if lk[0] == "decoder" else "m%s:%d" % (lk[1], lk[2])


def order(lk):
    return (lk[0], -1 if lk[1] is None else lk[1], lk[2])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace_dir")
    p.add_argument("--output-dir")
    p.add_argument("--decode-only", action="store_true")
    p.add_argument("--n-values", default="1,2,4,8,16,22,32,64,128,256")
    p.add_argument("--phase", default="train")
    a = p.parse_args()
    n_values = sorted({int(x) for x in a.n_values.split(",")})
    steps = defaultdict(lambda: [defaultdict(Counter), defaultdict(int), 0])
    for path in sorted(glob.glob(os.path.join(a.trace_dir, "router_trace_rank*.jsonl"))):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if a.phase != "all" and r.get("phase", a.phase) != a.phase:
                    continue
                lk = (r.get("block", "decoder"), r.get("mtp_idx"), r["layer"])
                s = steps[(r["rank"], r["step"])]
                c = s[0][lk]
                for token_top in r["top_indices"]:
                    for e in token_top:
                        c[e] += 1
                s[1][lk] += len(r["top_indices"])
                s[2] = r["num_tokens"]
    freq, tokens = defaultdict(Counter), Counter()
    for counters, ntok, last in steps.values():
        if len(counters) < 2 or (a.decode_only and last > 64):
            continue
        for lk, c in counters.items():
            if sum(c.values()):
                freq[lk].update(c)
                tokens[lk] += ntok[lk]
    keys = sorted(freq, key=order)
    if not a.output_dir:
        return
    os.makedirs(a.output_dir, exist_ok=True)
    with open(os.path.join(a.output_dir, "concentration_per_layer.csv"), "w") as f:
        f.write(",".join(["block", "mtp_idx", "layer", "layer_label", "num_tokens", "unique_experts"]
                         + ["top%d" % n for n in n_values]) + "\n")
        for lk in keys:
            counts = sorted(freq[lk].values(), reverse=True)
            total = sum(counts)
            cov = [sum(counts[:min(n, len(counts))]) / total for n in n_values]
            f.write(",".join([lk[0], str(lk[1]), str(lk[2]), label(lk), str(tokens[lk]), str(len(counts))]
                             + [str(x) for x in cov]) + "\n")
    with open(os.path.join(a.output_dir, "expert_frequencies_per_layer.csv"), "w") as f:
        f.write("block,mtp_idx,layer,expert_id,count\n")
        for lk in keys:
            for e, c in sorted(freq[lk].items()):
                f.write("%s,%s,%d,%d,%d\n" % (lk[0], lk[1], lk[2], e, c))


if __name__ == "__main__":
    main()
