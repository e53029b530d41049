#!/usr/bin/python3
"""Routing concentration per MoE layer: expert activation frequencies and top-N coverage.

    concentration.py TRACE_DIR [--output-dir D] [--decode-only] [--num-experts E]
                     [--n-values 1,2,4,...] [--top-k K] [--phase train|eval|all]

Semantics of Megatron-LM's tools/moe_routing/analyze_routing_concentration.py (same table,
aggregate, CSVs and PNGs; docs/router_trace.md, "Concentration"), streaming: one pass counts the
top_indices with numpy, holding a (rank, step)'s counts aside until its second layer key shows
that it is a full pass; --decode-only needs two (pass 1 reads only each record's keys, to learn
the num_tokens of each step's last record). Memory: per-layer counts and one small entry per
(rank, step), never the records.
Differences: --num-experts defaults to the router state's expert count, else the largest id
seen + 1 (Megatron: 512); --phase (default train) drops Strata's evaluation records.
"""
import argparse
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from moe_routing import plots, trace
from moe_routing.common import add_common_args, resolve_num_experts


def topk_coverage(counts, n_values):
    """{N: share of all activations in the N most frequent experts} (Megatron's rule)."""
    seen = np.sort(counts[counts > 0])[::-1]
    total = int(seen.sum())
    if total == 0:
        return {n: float("nan") for n in n_values}
    cum = np.cumsum(seen)
    return {n: (int(cum[min(n, seen.size) - 1]) / total if min(n, seen.size) > 0 else 0.0)
            for n in n_values}


def scan_steps(trace_dir, phase):
    """Pass 1: {(rank, step): [first layer key, >= 2 keys, last num_tokens]}, per-layer top-k."""
    steps, layer_topk = {}, {}
    for meta, _ in trace.iter_records(trace_dir, indices=False):
        if not trace.phase_ok(meta, phase):
            continue
        lk = trace.layer_key(meta)
        s = steps.setdefault((meta["rank"], meta["step"]), [lk, False, 0])
        s[1] = s[1] or s[0] != lk
        s[2] = meta["num_tokens"]
        if meta.get("topk") is not None and lk not in layer_topk:
            layer_topk[lk] = meta["topk"]
    return steps, layer_topk


def count(trace_dir, phase, accept):
    """Pass 2: per-layer expert counts and tokens over the records of accepted steps."""
    freq, tokens, acc, skipped = {}, {}, 0, 0
    for meta, top in trace.iter_records(trace_dir):
        if not trace.phase_ok(meta, phase):
            continue
        if not accept(meta["rank"], meta["step"]):
            skipped += 1
            continue
        acc += 1
        if top.size == 0:
            continue
        lk = trace.layer_key(meta)
        freq.setdefault(lk, trace.Counts()).add(top)
        tokens[lk] = tokens.get(lk, 0) + top.shape[0]
    return {k: c.v for k, c in freq.items()}, tokens, acc, skipped


def count_one_pass(trace_dir, phase):
    """The default filter (>= 2 layer keys in the (rank, step)) in one pass: a step's counts wait
    in `pending` only until its second layer key arrives; steps that never get one are skipped."""
    freq, tokens, layer_topk, steps = {}, {}, {}, {}
    acc = skipped = 0

    def add(lk, top, into_freq, into_tokens):
        into_freq.setdefault(lk, trace.Counts()).add(top)
        into_tokens[lk] = into_tokens.get(lk, 0) + top.shape[0]

    for meta, top in trace.iter_records(trace_dir):
        if not trace.phase_ok(meta, phase):
            continue
        lk = trace.layer_key(meta)
        if meta.get("topk") is not None and lk not in layer_topk:
            layer_topk[lk] = meta["topk"]
        s = steps.setdefault((meta["rank"], meta["step"]), [lk, {}, {}, 0])  # key, counts, tokens, records
        if s[1] is not None and lk != s[0]:  # second layer key: the step is accepted
            for k, c in s[1].items():
                freq.setdefault(k, trace.Counts()).add_counts(c.v)
                tokens[k] = tokens.get(k, 0) + s[2][k]
            acc += s[3]
            s[1] = s[2] = None
        if s[1] is None:
            acc += 1
            if top.size:
                add(lk, top, freq, tokens)
        else:
            s[3] += 1
            if top.size:
                add(lk, top, s[1], s[2])
    skipped = sum(s[3] for s in steps.values() if s[1] is not None)
    return {k: c.v for k, c in freq.items()}, tokens, acc, skipped, layer_topk


def analyse(args):
    if args.decode_only:
        steps, layer_topk = scan_steps(args.trace_dir, args.phase)
        decode = lambda r, s: steps[(r, s)][1] and steps[(r, s)][2] <= 64
        freq, tokens, acc, skipped = count(args.trace_dir, args.phase, decode)
    else:
        freq, tokens, acc, skipped, layer_topk = count_one_pass(args.trace_dir, args.phase)
    keys = sorted(freq, key=trace.key_order)
    if not keys:
        return None
    E = resolve_num_experts(args, max(f.size for f in freq.values()))
    freq = {k: np.pad(v, (0, max(0, E - v.size))) for k, v in freq.items()}
    vals = list(layer_topk.values())
    global_topk = args.top_k or (max(sorted(set(vals)), key=vals.count) if vals else None)
    per_topk = {k: layer_topk.get(k, args.top_k) for k in keys}
    return dict(keys=keys, freq=freq, tokens=tokens, acc=acc, skipped=skipped, E=E,
                global_topk=global_topk, per_topk=per_topk)


def report(args, r, n_values):
    keys, E, gk = r["keys"], r["E"], r["global_topk"]
    print("Loaded traces from: %s" % args.trace_dir)
    print("Filter: %s" % ("decode-only" if args.decode_only else "full forward passes (any size)"))
    print("Accepted records: %d; skipped: %d" % (r["acc"], r["skipped"]))
    print("Layers found: %d  (%s..%s)" % (len(keys), trace.key_label(keys[0]), trace.key_label(keys[-1])))
    if gk is None:
        print("[WARNING] top-K not found in traces and --top-k not provided; "
              "uniform-baseline column will be omitted.")
    else:
        print("Top-K (router): %d" % gk)
    header = ("  %8s | %6s | %4s | " % ("layer", "tokens", "uniq")
              + " | ".join("top%d" % n for n in n_values)
              + (" | uniform-bl@%d" % gk if gk is not None else ""))
    print("\nPer-layer concentration:\n" + header + "\n  " + "-" * (len(header) - 2))
    rows = []
    for k in keys:
        cov = topk_coverage(r["freq"][k], n_values)
        uniq = int((r["freq"][k] > 0).sum())
        rows.append((k, r["tokens"][k], uniq, cov))
        bl = r["per_topk"][k]
        print("  %8s | %6d | %4d | " % (trace.key_label(k), r["tokens"][k], uniq)
              + " | ".join("%.3f" % cov[n] for n in n_values)
              + (" | %.3f" % (bl / E) if bl is not None else ""))
    print("\nAggregate (averaged across layers):")
    for n in n_values:
        mean = sum(row[3][n] for row in rows) / len(rows)
        if gk is not None:
            print("  Mean top-%d coverage: %.3f  (uniform baseline: %.3f, ratio: %.2f\u00d7)"
                  % (n, mean, n / E, mean / (n / E)))
        else:
            print("  Mean top-%d coverage: %.3f" % (n, mean))
    print("\nInterpretation: coverage ratio = observed / uniform baseline."
          "\n  > 2\u00d7 : concentrated \u2014 a small hot-set accounts for most activations"
          "\n  ~1\u00d7  : near-uniform \u2014 load balancing is effective, no static strategy helps")
    return rows


def write_outputs(args, r, rows, n_values):
    os.makedirs(args.output_dir, exist_ok=True)
    path = os.path.join(args.output_dir, "concentration_per_layer.csv")
    with open(path, "w") as f:
        f.write(",".join(["block", "mtp_idx", "layer", "layer_label", "num_tokens", "unique_experts"]
                         + ["top%d" % n for n in n_values]) + "\n")
        for (b, m, l), ntok, uniq, cov in rows:
            f.write(",".join([b, str(m), str(l), trace.key_label((b, m, l)), str(ntok), str(uniq)]
                             + [str(cov[n]) for n in n_values]) + "\n")
    print("\nWrote %s" % path)
    path = os.path.join(args.output_dir, "expert_frequencies_per_layer.csv")
    with open(path, "w") as f:
        f.write("block,mtp_idx,layer,expert_id,count\n")
        for b, m, l in r["keys"]:
            v = r["freq"][(b, m, l)]
            f.write("".join("%s,%s,%d,%d,%d\n" % (b, m, l, e, v[e]) for e in np.flatnonzero(v)))
    print("Wrote %s" % path)
    if plots.pyplot() is None:
        print("matplotlib not available; skipping plots.")
        return
    E, keys = r["E"], r["keys"]
    sweep = list(range(1, E + 1, max(1, E // 100)))
    curves = [[topk_coverage(r["freq"][k], sweep)[n] for n in sweep] for k in keys]
    print("Wrote %s" % plots.coverage_curve(args.output_dir, sweep, curves, E))
    share = np.zeros((E, len(keys)))
    for i, k in enumerate(keys):
        tot = r["tokens"][k] * (r["per_topk"][k] or 1)
        share[:, i] = r["freq"][k][:E] / tot if tot else 0.0
    order = np.argsort(-sum(r["freq"][k][:E] for k in keys), kind="stable")[:min(128, E)]
    print("Wrote %s" % plots.expert_layer_heatmap(args.output_dir, share[order],
                                                   [trace.key_label(k) for k in keys]))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Expert-activation concentration per MoE layer.")
    add_common_args(p)
    p.add_argument("--decode-only", action="store_true",
                   help="only decode-style steps (>= 2 layers, last record's num_tokens <= 64)")
    p.add_argument("--n-values", default="1,2,4,8,16,22,32,64,128,256")
    return p.parse_args(argv)


def main(argv=None):
    return run(parse_args(argv))


def run(args):
    n_values = sorted({int(x) for x in args.n_values.split(",")})
    r = analyse(args)
    if r is None:
        print("No data found. Exiting.")
        return 0
    rows = report(args, r, n_values)
    if args.output_dir:
        write_outputs(args, r, rows, n_values)
    return 0


if __name__ == "__main__":
    from moe_routing.common import run_main
    run_main(main)
