#!/usr/bin/python3
"""Expert load beyond Megatron's tools: EP-rank imbalance, co-activation, drift over steps.

    load.py TRACE_DIR [--output-dir D] [--ep-size N] [--num-experts E] [--after-drop]
            [--phase train|eval|all]

Per (phase, step, layer), summed over every rank and micro-batch of the step: the token-expert
assignments of each EP rank (experts split contiguously, E/N per rank) and the imbalance
max/mean (what a capacity factor must cover); per layer, how often two experts share a token's
top-k (co-activation); per layer and step, the Jensen-Shannon divergence (bits) and L1 distance of
the load distribution from the layer's first traced step (drift). Layers keyed by (block, mtp_idx,
layer). --after-drop removes the `dropped` pairs of Strata's records from the loads (default: the
router's decisions). Rank files are merged by step (each file is in step order, as the tracer
writes it); memory holds one step's counts, the co-activation matrices and one row per step and
layer. docs/router_trace.md, "Load".
"""
import argparse
import heapq
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from moe_routing import plots, trace
from moe_routing.common import add_common_args, resolve_num_experts
from moe_routing.metrics import js_divergence, l1_distance


def max_expert_id(trace_dir, phase):
    m = -1
    for meta, top in trace.iter_records(trace_dir):
        if top.size and trace.phase_ok(meta, phase):
            m = max(m, int(top.max()))
    return m + 1


MAX_PLOTTED_EXPERTS = 1024


def coactivation_pairs(top, E):
    """The unordered expert pairs (a < b) sharing a token's top-k, as codes a * E + b (one a pair)."""
    T, k = top.shape
    codes = [np.minimum(top[:, i], top[:, j]) * E + np.maximum(top[:, i], top[:, j])
             for i in range(k) for j in range(i + 1, k)]
    return np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)


class PairCounts:
    """Counts of pair codes a * E + b: a dense array of E * E counts while that is at most
    DENSE_PAIRS (one bincount a record), else sparse, the pairs seen (a trace naming expert 65535
    would otherwise ask for 32 GiB of counts a layer). nonzero(): codes ascending and their counts."""
    DENSE_PAIRS = 1 << 22

    def __init__(self, E):
        self.size = E * E
        self.counts = np.zeros(self.size, dtype=np.int64) if self.size <= self.DENSE_PAIRS else None
        self.codes = None if self.counts is not None else np.zeros(0, dtype=np.int64)
        self.sparse = np.zeros(0, dtype=np.int64)

    def add(self, codes):
        if self.counts is not None:
            self.counts += np.bincount(codes, minlength=self.size)
            return
        u, c = np.unique(codes, return_counts=True)
        merged, inverse = np.unique(np.concatenate([self.codes, u]), return_inverse=True)
        counts = np.zeros(merged.size, dtype=np.int64)
        np.add.at(counts, inverse, np.concatenate([self.sparse, c]))
        self.codes, self.sparse = merged, counts

    def nonzero(self):
        if self.counts is not None:
            codes = np.flatnonzero(self.counts)
            return codes, self.counts[codes]
        return self.codes, self.sparse

    def dense(self):
        if self.counts is not None:
            return self.counts
        out = np.zeros(self.size, dtype=np.int64)
        out[self.codes] = self.sparse
        return out


def _stepped(path, phase):
    last = None
    for meta, top in trace.iter_file(path):
        if last is not None and meta["step"] < last:
            raise ValueError("%s is not in step order (step %d after %d)" % (path, meta["step"], last))
        last = meta["step"]
        if trace.phase_ok(meta, phase):
            yield meta, top


class LoadStats:
    """Accumulates one step at a time; finished steps become rows."""

    def __init__(self, E, ep, after_drop):
        self.E, self.ep, self.after_drop = E, ep, after_drop
        self.step, self.buf = None, {}
        self.imbalance, self.drift, self.first, self.coact, self.tokens = [], [], {}, {}, {}

    def add(self, meta, top):
        if meta["step"] != self.step:
            self.finish()
            self.step = meta["step"]
        lk, E = trace.layer_key(meta), self.E
        if top.size and top.max() >= E:
            raise ValueError("expert id %d >= --num-experts %d" % (top.max(), E))
        c = np.bincount(top.ravel(), minlength=E)
        if self.after_drop and meta.get("dropped"):
            c -= np.bincount(np.asarray(meta["dropped"])[:, 1], minlength=E)
        key = (meta.get("phase"), lk)
        b = self.buf.setdefault(key, [np.zeros(E, np.int64), 0])
        b[0] += c
        b[1] += top.shape[0]
        if lk not in self.coact:
            self.coact[lk] = [PairCounts(E), np.zeros(E, np.int64)]
        self.coact[lk][0].add(coactivation_pairs(top, E))
        self.coact[lk][1] += np.bincount(top.ravel(), minlength=E)
        self.tokens[lk] = self.tokens.get(lk, 0) + top.shape[0]

    def finish(self):
        for (phase, lk), (c, ntok) in sorted(self.buf.items(), key=lambda kv: (str(kv[0][0]), trace.key_order(kv[0][1]))):
            total = int(c.sum())
            if total == 0:
                continue
            per_rank = c.reshape(self.ep, -1).sum(axis=1)
            mean = total / self.ep
            self.imbalance.append((phase, self.step, lk, ntok, total, int(per_rank.max()), mean,
                                   per_rank.max() / mean, int(per_rank.argmax())))
            first = self.first.setdefault((phase, lk), c.copy())
            self.drift.append((phase, self.step, lk, js_divergence(c, first), l1_distance(c, first)))
        self.buf = {}


def analyse(args):
    E = resolve_num_experts(args, None) or max_expert_id(args.trace_dir, args.phase)
    ep = args.ep_size or E
    if E <= 0 or E % ep:
        raise ValueError("--ep-size %d does not divide the %d experts" % (ep, E))
    stats = LoadStats(E, ep, args.after_drop)
    streams = [_stepped(p, args.phase) for p in trace.trace_files(args.trace_dir)]
    for meta, top in heapq.merge(*streams, key=lambda r: r[0]["step"]):
        stats.add(meta, top)
    stats.finish()
    return stats


def report(stats):
    print("EP load imbalance (max/mean token-expert assignments per EP rank; EP size %d, %d experts)"
          % (stats.ep, stats.E))
    print("  %8s | %6s | %5s | %6s | %6s | %9s" % ("layer", "phase", "steps", "mean", "max", "drift(JS)"))
    keys = sorted({(r[0] or "", r[2]) for r in stats.imbalance}, key=lambda x: (x[0], trace.key_order(x[1])))
    for phase, lk in keys:
        imb = [r[7] for r in stats.imbalance if (r[0] or "") == phase and r[2] == lk]
        js = [r[3] for r in stats.drift if (r[0] or "") == phase and r[2] == lk]
        print("  %8s | %6s | %5d | %6.3f | %6.3f | %9.4f"
              % (trace.key_label(lk), phase or "-", len(imb), np.mean(imb), np.max(imb), js[-1]))
    print("\nCo-activation: most frequent expert pair per layer (share of tokens, lift over independence)")
    for lk in sorted(stats.coact, key=trace.key_order):
        pairs, single = stats.coact[lk]
        T = stats.tokens[lk]
        codes, counts = pairs.nonzero()
        if T == 0 or not counts.size:
            continue
        top = int(counts.argmax())  # the first of the most frequent, in code order
        n = counts[top]
        a, b = divmod(int(codes[top]), stats.E)
        lift = n * T / (single[a] * single[b])
        print("  %8s | experts %d+%d | %.3f | lift %.2f" % (trace.key_label(lk), a, b, n / T, lift))


def write_outputs(args, stats):
    d = args.output_dir
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "ep_load_imbalance.csv"), "w") as f:
        f.write("phase,step,block,mtp_idx,layer,layer_label,num_tokens,assignments,"
                "max_rank_assignments,mean_rank_assignments,imbalance,hottest_ep_rank\n")
        for ph, step, lk, ntok, tot, mx, mean, imb, hot in stats.imbalance:
            f.write("%s,%d,%s,%s,%d,%s,%d,%d,%d,%r,%r,%d\n"
                    % (ph or "", step, lk[0], lk[1], lk[2], trace.key_label(lk), ntok, tot, mx, mean, imb, hot))
    with open(os.path.join(d, "load_drift.csv"), "w") as f:
        f.write("phase,step,block,mtp_idx,layer,layer_label,js_vs_first,l1_vs_first\n")
        for ph, step, lk, js, l1 in stats.drift:
            f.write("%s,%d,%s,%s,%d,%s,%r,%r\n" % (ph or "", step, lk[0], lk[1], lk[2], trace.key_label(lk), js, l1))
    with open(os.path.join(d, "coactivation_per_layer.csv"), "w") as f:
        f.write("block,mtp_idx,layer,expert_a,expert_b,count\n")
        for lk in sorted(stats.coact, key=trace.key_order):
            codes, counts = stats.coact[lk][0].nonzero()
            for code, n in zip(codes.tolist(), counts.tolist()):
                if n:
                    a, b = divmod(code, stats.E)
                    f.write("%s,%s,%d,%d,%d,%d\n" % (lk[0], lk[1], lk[2], a, b, n))
    print("\nWrote ep_load_imbalance.csv, load_drift.csv, coactivation_per_layer.csv in %s" % d)
    if plots.pyplot() is None:
        print("matplotlib not available; skipping plots.")
        return
    write_plots(d, stats)


def _grid(rows, col):
    """(layer labels, steps, matrix [layers, steps]) of one phase's rows."""
    keys = sorted({(r[0] or "", r[2]) for r in rows}, key=lambda x: (x[0], trace.key_order(x[1])))
    steps = sorted({r[1] for r in rows})
    mat = np.full((len(keys), len(steps)), np.nan)
    ki = {k: i for i, k in enumerate(keys)}
    si = {s: i for i, s in enumerate(steps)}
    for r in rows:
        mat[ki[(r[0] or "", r[2])], si[r[1]]] = r[col]
    labels = [trace.key_label(k[1]) + ("" if not k[0] or len({x[0] for x in keys}) == 1 else " " + k[0]) for k in keys]
    return labels, steps, mat


def write_plots(d, stats):
    labels, steps, mat = _grid(stats.imbalance, 7)
    plots.layer_step_heatmap(d, "ep_load_imbalance.png", mat, labels, steps,
                             "EP load imbalance (max/mean per EP rank, EP size %d)" % stats.ep, "max / mean")
    labels, steps, mat = _grid(stats.drift, 3)
    plots.lines_over_steps(d, "load_drift.png", steps, list(zip(labels, mat)),
                           "Load drift: JS divergence from the layer's first traced step", "JS divergence (bits)")
    if stats.E > MAX_PLOTTED_EXPERTS:
        print("Co-activation plots skipped: %d experts (an E x E image; at most %d)" % (stats.E, MAX_PLOTTED_EXPERTS))
        return
    for lk, (pairs, single) in stats.coact.items():
        T = stats.tokens[lk]
        m = pairs.dense().reshape(stats.E, stats.E).astype(float)
        m = m + m.T
        m[np.diag_indices(stats.E)] = single
        plots.coactivation(d, trace.key_label(lk), m / max(T, 1))
    print("Wrote ep_load_imbalance.png, load_drift.png, coactivation_<layer>.png in %s" % d)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="EP load imbalance, co-activation and load drift per MoE layer.")
    add_common_args(p)
    p.add_argument("--ep-size", type=int, default=None,
                   help="expert-parallel size (default: one expert per rank)")
    p.add_argument("--after-drop", action="store_true", help="subtract the `dropped` pairs from the loads")
    return p.parse_args(argv)


def main(argv=None):
    return run(parse_args(argv))


def run(args):
    stats = analyse(args)
    if not stats.imbalance:
        print("No data found. Exiting.")
        return 0
    report(stats)
    if args.output_dir:
        write_outputs(args, stats)
    return 0


if __name__ == "__main__":
    from moe_routing.common import run_main
    run_main(main)
