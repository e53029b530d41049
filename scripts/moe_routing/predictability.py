#!/usr/bin/python3
"""Cross-layer routing predictability: layer L's router applied to layer L-1's hidden states.

    predictability.py TRACE_DIR [--output-dir D] [--top-k K] [--num-experts E]
                      [--layers 3,5,m0:1] [--router-state-dir DIR] [--phase train|eval|all]

Semantics of Megatron-LM's tools/moe_routing/analyze_routing_predictability.py (docs/router_trace.md,
"Predictability"): per consecutive pair (L_prev, L) of traced layers with router state, over every
sample holding both with equal num_tokens, the predicted per-expert counts (L's router on the
hidden states entering L_prev's router) against L's recorded counts: cosine, Spearman (average
ranks), overlap of the hottest E//8 experts; a table, predictability_per_layer.csv and .png.
Differences from Megatron (all deliberate): layers are keyed by (block, mtp_idx, layer), so decoder
and MTP layers never collide and pairs never cross blocks; a sample is (rank, step, phase,
micro_batch), so micro-batches do not overwrite each other; sqrtsoftplus is sqrt(softplus(logits))
(Megatron falls through to the raw logits and adds the bias to them); the expert bias is added to
sigmoid / sqrtsoftplus scores only (as the router does); group-limited routing is applied when the
state names its groups. Streaming: pass 1 indexes each record's sidecar offsets, pass 2 reads
top_indices and the hidden states of one record at a time.
"""
import argparse
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from moe_routing import plots, sidecar, trace
from moe_routing.common import add_common_args
from moe_routing.metrics import cosine, hot_overlap, spearman
from moe_routing.router_state import load_router_state


def router_topk(h, info, k):
    """Top-k expert ids [T, k] (descending score, ties to the lower id) of a router on h [T, H]."""
    w = np.asarray(info["weight"], dtype=np.float32)
    logits = np.asarray(h, dtype=np.float32) @ w.T
    fn = info.get("score_function") or "softmax"
    if fn == "softmax":
        scores = logits  # softmax is monotonic: the same selection
    elif fn == "sigmoid":
        scores = 1.0 / (1.0 + np.exp(-logits))
    elif fn == "sqrtsoftplus":
        scores = np.sqrt(np.logaddexp(np.float32(0), logits))
    else:
        raise ValueError("router score_function %r is not softmax, sigmoid or sqrtsoftplus" % fn)
    if info.get("expert_bias") is not None and fn != "softmax":
        scores = scores + np.asarray(info["expert_bias"], dtype=np.float32)
    G, g = info.get("num_groups"), info.get("group_topk")
    if G and g:
        T, E = scores.shape
        grouped = scores.reshape(T, G, E // G)
        gscore = -np.sort(-grouped, axis=-1)[..., :max(1, k // g)].sum(-1)
        keep = np.argsort(-gscore, axis=-1, kind="stable")[:, :g]
        mask = np.zeros((T, G), dtype=bool)
        np.put_along_axis(mask, keep, True, axis=-1)
        scores = np.where(np.repeat(mask, E // G, axis=-1), scores, -np.inf)
    return np.argsort(-scores, axis=-1, kind="stable")[:, :k]


def sample_key(meta):
    return (meta["rank"], meta["step"], meta.get("phase"), meta.get("micro_batch"))


def index_trace(trace_dir, phase):
    """Pass 1: {sample: {layer key: (ordinal, sidecar keys)}} for records with hidden states; the last
    record of a (sample, layer) wins, as in Megatron. Also the number of records in all."""
    index, n = {}, 0
    for n, (meta, _) in enumerate(trace.iter_records(trace_dir, indices=False), 1):
        if "hs_offset" in meta and trace.phase_ok(meta, phase):
            keep = {k: meta[k] for k in ("rank", "num_tokens", "hs_offset", "hs_bytes", "hs_shape")}
            index.setdefault(sample_key(meta), {})[trace.layer_key(meta)] = (n, keep)
    return index, n


def layer_pairs(common, layers_arg):
    """Consecutive pairs within each (block, mtp_idx); --layers keeps the listed destinations."""
    pairs = [(a, b) for a, b in zip(common, common[1:]) if a[:2] == b[:2]]
    if not layers_arg:
        return pairs
    want = set()
    for x in layers_arg.split(","):
        x = x.strip()
        want.add(x if ":" in x else "d:%d" % int(x))
    return [(a, b) for a, b in pairs if trace.key_label(b) in want]


def accumulate(args, index, state, pairs):
    """Pass 2: predicted and actual counts per pair."""
    by_dst = {b: a for a, b in pairs}
    acc = {p: [np.zeros(state[p[1]]["weight"].shape[0]), np.zeros(state[p[1]]["weight"].shape[0]), 0]
           for p in pairs}
    handles = {}
    try:
        for n, (meta, top) in enumerate(trace.iter_records(args.trace_dir), 1):
            dst = trace.layer_key(meta)
            src = by_dst.get(dst)
            layers = index.get(sample_key(meta), {}) if src is not None else {}
            if src not in layers or layers.get(dst, (0,))[0] != n:
                continue
            src_meta = layers[src][1]
            if src_meta["num_tokens"] != meta["num_tokens"]:
                continue
            info = state[dst]
            if src_meta["hs_shape"][-1] != info["weight"].shape[1]:
                continue
            rank = src_meta["rank"]
            if rank not in handles:
                handles[rank] = open(sidecar.sidecar_path(args.trace_dir, rank), "rb")
            hs = sidecar.load_for_record(src_meta, args.trace_dir, handle=handles[rank])
            k = args.top_k or info.get("topk") or meta["topk"]
            E = info["weight"].shape[0]
            a = acc[(src, dst)]
            a[0] += np.bincount(router_topk(hs, info, k).ravel(), minlength=E)[:E]
            a[1] += np.bincount(top.ravel(), minlength=E)[:E]
            a[2] += 1
    finally:
        for f in handles.values():
            f.close()
    return acc


def main(argv=None):
    p = argparse.ArgumentParser(description="Distribution predictability of L from L_prev's hidden states.")
    add_common_args(p)
    p.add_argument("--layers", default=None, help="destination layers: 3,5 (decoder) or labels d:3,m0:1")
    p.add_argument("--router-state-dir", default=None, help="router state directory (default TRACE_DIR)")
    args = p.parse_args(argv)
    state = load_router_state(args.router_state_dir or args.trace_dir)
    index, total = index_trace(args.trace_dir, args.phase)
    with_hs = sum(len(v) for v in index.values())
    print("Loaded router state for %d layers; %d/%d records with hidden states." % (len(state), with_hs, total))
    traced = {lk for layers in index.values() for lk in layers}
    common = sorted(traced & set(state), key=trace.key_order)
    if len(common) < 2:
        raise ValueError("need >= 2 MoE layers with both router state and traced hidden states")
    E0 = state[common[0]]["weight"].shape[0]
    if args.num_experts and args.num_experts != E0:
        print("WARNING: --num-experts %d != router weight rows %d. Using %d." % (args.num_experts, E0, E0))
    pairs = layer_pairs(common, args.layers)
    acc = accumulate(args, index, state, pairs)
    rows = report(pairs, acc)
    if args.output_dir and rows:
        write_outputs(args.output_dir, rows)
    return 0


def report(pairs, acc):
    m = max(1, len(acc[pairs[0]][0]) // 8) if pairs else 1
    print("\nDISTRIBUTION PREDICTABILITY  (L's router applied to L_prev's hidden states)")
    print("  %5s -> %5s | %6s | %8s | hot-%d overlap\n  %s" % ("src", "dst", "cos", "spearman", m, "-" * 54))
    rows = []
    for src, dst in pairs:
        pred, act, n = acc[(src, dst)]
        ls, ld = trace.key_label(src), trace.key_label(dst)
        if act.sum() == 0:
            print("  %5s -> %5s | (no data)" % (ls, ld))
            continue
        hm = max(1, len(act) // 8)
        row = (ls, ld, cosine(pred, act), spearman(pred, act), hot_overlap(pred, act, hm), n)
        print("  %5s -> %5s | %6.3f | %8.3f | %6.3f" % row[:5])
        rows.append(row)
    if rows:
        print("\nMean cosine: %.3f  |  Mean Spearman: %.3f"
              % (sum(r[2] for r in rows) / len(rows), sum(r[3] for r in rows) / len(rows)))
        print("\nInterpretation:\n  cos/Spearman >= 0.90 / 0.70 : strong distributional signal: L_prev's"
              "\n    hidden states predict L's aggregate expert load well."
              "\n  values near zero            : weak cross-layer signal for this pair.")
    return rows


def write_outputs(out_dir, rows):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "predictability_per_layer.csv")
    with open(path, "w") as f:
        f.write("src,dst,count_cosine,count_spearman,hot_overlap,samples\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")
    print("\nWrote %s" % path)
    if plots.pyplot() is None:
        print("matplotlib unavailable; skipping plot.")
    else:
        print("Wrote %s" % plots.predictability(out_dir, rows))


if __name__ == "__main__":
    from moe_routing.common import run_main
    run_main(main)
