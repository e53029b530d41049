"""Streaming reader of router traces: router_trace_rank<R>.jsonl (docs/router_trace.md, "Files").

One JSON object per line (Megatron-LM's megatron/core/transformer/moe/router_trace.py schema plus
Strata's micro_batch / phase / dropped). Records are yielded one at a time; nothing keeps them.

Fast path: `top_indices` ([T][k] ints) is cut out of the line as bytes and parsed by numpy
(brackets blanked, then np.fromstring with ',' separators); the rest of the line, with
`"top_indices": []`, goes through json.loads. A line the fast path cannot prove right (the parsed
count differs from num_tokens * topk, a negative id, a shape it does not expect) is parsed again
with json.loads as a whole, so the result is always that of json.loads.
"""
import glob
import json
import os
import re
import warnings

import numpy as np

_KEY = b'"top_indices"'
_BLANK = bytes.maketrans(b"[]", b"  ")
_RANK_RE = re.compile(r"router_trace_rank(\d+)\.jsonl$")


def trace_files(trace_dir):
    """The router_trace_rank*.jsonl files of a directory, sorted by name (Megatron's order)."""
    paths = sorted(glob.glob(os.path.join(trace_dir, "router_trace_rank*.jsonl")))
    if not paths:
        raise FileNotFoundError("no router_trace_rank*.jsonl in %s" % trace_dir)
    return paths


def layer_key(meta):
    """(block, mtp_idx, layer): decoder and MTP layers never collide. Block defaults to decoder."""
    return (meta.get("block", "decoder"), meta.get("mtp_idx"), meta["layer"])


def key_order(key):
    """Sort key for layer keys: decoder first, then MTP heads by index, then layer."""
    block, mtp_idx, layer = key
    return (block, -1 if mtp_idx is None else mtp_idx, layer)


def key_label(key):
    """Megatron's label: d:<layer> for the decoder, m<mtp_idx>:<layer> for MTP."""
    block, mtp_idx, layer = key
    return "d:%d" % layer if block == "decoder" else "m%s:%d" % (mtp_idx, layer)


def _slow(line):
    rec = json.loads(line)
    top = rec.pop("top_indices", None)
    if top is None:
        return rec, None
    arr = np.asarray(top, dtype=np.int64)
    if arr.ndim != 2:
        arr = np.zeros((0, rec.get("topk") or 0), dtype=np.int64) if not len(top) else arr.reshape(len(top), -1)
    return rec, arr


def _span(line):
    """(start, end) of the top_indices list value in the line bytes, or None."""
    i = line.find(_KEY)
    if i < 0:
        return None
    j = line.find(b"[", i + len(_KEY))
    if j < 0 or line[i + len(_KEY):j].strip() != b":":
        return None
    if line[j + 1:j + 2] == b"]":
        return j, j + 2
    k = line.find(b"]]", j)
    return None if k < 0 else (j, k + 2)


def parse_line(line, indices=True):
    """(meta dict without top_indices, int64 array [T, k] or None when indices=False)."""
    span = _span(line)
    if span is None:
        rec, arr = _slow(line)
        return rec, arr if indices else None
    j, k = span
    try:
        meta = json.loads(line[:j] + b"[]" + line[k:])
    except ValueError:
        rec, arr = _slow(line)
        return rec, arr if indices else None
    meta.pop("top_indices", None)
    if not indices:
        return meta, None
    t, kk = meta.get("num_tokens"), meta.get("topk")
    if not isinstance(t, int) or not isinstance(kk, int):
        return _slow(line)
    if t * kk == 0:
        return _slow(line)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr = np.fromstring(line[j:k].translate(_BLANK), dtype=np.int64, sep=",")
    if arr.size != t * kk or (arr.size and arr.min() < 0):
        return _slow(line)
    return meta, arr.reshape(t, kk)


def iter_file(path, indices=True):
    """Yield (meta, top_indices) for each non-empty line of one JSONL file."""
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                yield parse_line(line, indices)


def iter_records(trace_dir, indices=True):
    """Yield (meta, top_indices) over every rank file in sorted order."""
    for path in trace_files(trace_dir):
        yield from iter_file(path, indices)


def phase_ok(meta, phase):
    """--phase filter: 'all', or the record's phase; records without one (inference, Megatron
    traces) pass every filter."""
    return phase == "all" or meta.get("phase", phase) == phase


class Counts:
    """Per-expert counts that grow with the largest expert id seen (when E is not known)."""

    def __init__(self, n=0):
        self.v = np.zeros(n, dtype=np.int64)

    def add(self, ids, weights=None):
        ids = np.asarray(ids).ravel()
        if ids.size == 0:
            return
        b = np.bincount(ids, weights=weights, minlength=self.v.size)
        if b.size > self.v.size:
            self.v = np.concatenate([self.v, np.zeros(b.size - self.v.size, dtype=np.int64)])
        self.v += b.astype(np.int64)
