"""Streaming reader of router traces: router_trace_rank<R>.jsonl (docs/router_trace.md, "Files").

One JSON object per line (Megatron-LM's megatron/core/transformer/moe/router_trace.py schema plus
Strata's micro_batch / phase / dropped). Records are yielded one at a time; nothing keeps them.

Fast path: the bytes of `top_indices` ([T][k] ints) are parsed by vectorised numpy (digit runs
found by comparing neighbouring bytes, values summed digit by digit), without a Python object per
id; the rest of the line, with `"top_indices": []`, goes through json.loads. The fast path takes
a line only when it proves the list is [T][k] non-negative ints (see _parse_ids: no sign, point,
quote or letter; T + 1 brackets of each kind; a ']' right after every k-th id, ',' after the
others; '[' right before each row's first id); json.dumps' spelling and a compact writer's
both pass. Any other line is parsed with json.loads as a whole. For a line that is valid JSON the
result is therefore always json.loads' (np.asarray of its list); the fast path does not re-check
JSON syntax the tracer already guarantees (leading zeros, say, would be read, not rejected).
"""
import glob
import json
import os
import sys

import numpy as np

_KEY = b'"top_indices"'


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


# The largest expert id the analyses accept: they hold a count per expert up to the largest id seen,
# so an id is bounded by what a model can have, not by what a line can spell (1e9 would ask for 8 GB).
MAX_EXPERT_ID = (1 << 16) - 1
_INT_KEYS, _OPTIONAL_INT_KEYS = ("step", "layer"), ("rank", "num_tokens", "topk", "mtp_idx", "micro_batch")
_OPTIONAL_STR_KEYS = ("stage", "block", "phase")


def _slow(line):
    rec = json.loads(line)
    if not isinstance(rec, dict):
        raise ValueError("a record is a JSON object, not %s" % type(rec).__name__)
    top = rec.pop("top_indices", None)
    if top is None:
        return rec, None
    if not isinstance(top, list):
        raise ValueError("top_indices is %s, not a list" % type(top).__name__)
    arr = np.asarray(top)  # ragged lists: ValueError
    integral_floats = arr.dtype.kind == "f" and bool(np.all(np.abs(arr) < 2.0 ** 62) and np.all(arr == np.trunc(arr)))
    if arr.size and arr.dtype.kind not in "iu" and not integral_floats:  # null, true, 1.5, "3", 2**70
        raise ValueError("top_indices holds something other than integer expert ids")
    arr = arr.astype(np.int64)
    if arr.ndim != 2:
        arr = np.zeros((0, _int_or_zero(rec.get("topk"))), dtype=np.int64) if not len(top) else arr.reshape(len(top), -1)
    return rec, arr


def _int_or_zero(v):
    return v if _is_int(v) and v >= 0 else 0


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_record(meta, top, indices=True):
    """ValueError unless the record has what the analyses read (docs/router_trace.md, "Records"):
    integer step and layer; rank, num_tokens, topk, mtp_idx, micro_batch integers when present;
    stage, block, phase strings; with indices, top_indices a [num_tokens][topk] list of ids in
    0..MAX_EXPERT_ID; dropped, when present, [token, expert] pairs of the record's tokens and such ids."""
    for key in _INT_KEYS:
        if not _is_int(meta.get(key)):
            raise ValueError('"%s" is %s, not an integer' % (key, json.dumps(meta.get(key))))
    for key in _OPTIONAL_INT_KEYS:
        if meta.get(key) is not None and not _is_int(meta[key]):
            raise ValueError('"%s" is %s, not an integer' % (key, json.dumps(meta[key])))
    for key in _OPTIONAL_STR_KEYS:
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise ValueError('"%s" is %s, not a string' % (key, json.dumps(meta[key])))
    if not indices:
        return
    if top is None:
        raise ValueError('no "top_indices"')
    if top.ndim != 2:
        raise ValueError("top_indices is not a [T][k] list (%d dimensions)" % top.ndim)
    t, k = meta.get("num_tokens"), meta.get("topk")
    if (t is not None and top.shape[0] != t) or (k is not None and top.shape[0] and top.shape[1] != k):
        raise ValueError("top_indices is [%d][%d], not [num_tokens][topk] = [%s][%s]" % (top.shape + (t, k)))
    if top.size and (top.min() < 0 or top.max() > MAX_EXPERT_ID):
        raise ValueError("an expert id in top_indices is outside 0..%d" % MAX_EXPERT_ID)
    dropped = meta.get("dropped")
    if dropped is not None:
        if not isinstance(dropped, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(_is_int(x) and x >= 0 for x in p) for p in dropped):
            raise ValueError('"dropped" is not a list of [token, expert] pairs')
        if any(p[0] >= top.shape[0] for p in dropped):
            raise ValueError("a token in dropped is outside 0..%d" % (top.shape[0] - 1))
        if any(p[1] > MAX_EXPERT_ID for p in dropped):
            raise ValueError("an expert id in dropped is outside 0..%d" % MAX_EXPERT_ID)


def _span(line):
    """(start, end) of the top_indices list value in the line bytes, or None."""
    i = line.find(_KEY)
    if i < 0 or line.find(_KEY, i + 1) >= 0:  # twice: json.loads keeps the last, so let it decide
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
        meta = None
    if not isinstance(meta, dict):
        rec, arr = _slow(line)
        return rec, arr if indices else None
    meta.pop("top_indices", None)
    if not indices:
        return meta, None
    t, kk = meta.get("num_tokens"), meta.get("topk")
    arr = None
    if isinstance(t, int) and isinstance(kk, int) and t > 0 and kk > 0:
        arr = _parse_ids(line, j, k, t, kk)
    return (meta, arr) if arr is not None else _slow(line)


_AFTER = {}
_LOW_FORBIDDEN = (b"-", b".", b'"', b"+")


def _after(t, k):
    """The byte expected right after each id of a [t][k] list: ']' after every k-th, else ','."""
    if (t, k) not in _AFTER:
        if len(_AFTER) > 64:
            _AFTER.clear()
        _AFTER[(t, k)] = np.where(np.tile(np.arange(k) == k - 1, t), 93, 44).astype(np.uint8)
    return _AFTER[(t, k)]


def _parse_ids(line, j, k, t, kk):
    """int64 [t, kk] from line[j:k] ("[[3, 1], [0, 2]]"), or None when the shape is not proven.

    Proof, for a line that is valid JSON: no byte of the list is a sign, point, quote or letter
    (so it holds only non-negative integers, lists and whitespace); it opens with "[[", holds
    t + 1 '[' and t + 1 ']' and t*kk digit runs, each followed directly by ']' when it is the last
    of its row and by ',' otherwise; every row but the first opens with '[' right before its first
    id. Then the t + 1 '[' are the outer list and the t rows, and row r holds ids r*kk .. r*kk+kk-1.
    """
    n = k - j
    a = np.frombuffer(line, dtype=np.uint8, count=n, offset=j)
    d = a - np.uint8(48)
    isd = d < 10
    edges = np.flatnonzero(isd[1:] != isd[:-1])  # the byte before each run, each run's last
    if edges.size != 2 * t * kk or n < 5 or a[0] != 91 or a[1] != 91:
        return None
    if any(line.find(c, j, k) >= 0 for c in _LOW_FORBIDDEN):
        return None
    if np.count_nonzero(a > 57) != 2 * t + 2 or np.count_nonzero(a == 91) != t + 1:
        return None
    starts, ends = edges[0::2] + 1, edges[1::2]
    if not np.array_equal(a[ends + 1], _after(t, kk)):
        return None
    if t > 1 and not (a[starts[kk::kk] - 1] == 91).all():
        return None
    ndig = ends - starts
    longest = int(ndig.max())
    if longest > 15:
        return None
    dt = np.int16 if longest <= 3 else np.int64
    v = d[ends].astype(dt)
    for p in range(1, longest + 1):
        v += dt(10 ** p) * d[ends - p].astype(dt) * (ndig >= p)
    return v.astype(np.int64).reshape(t, kk)


def iter_file(path, indices=True):
    """Yield (meta, top_indices) for each non-empty line of one JSONL file, each checked by
    check_record. A last line cut short (no newline, not JSON: a run killed mid-write) is skipped
    with a warning; any other bad line is an error naming the file and line."""
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = parse_line(line, indices)
                check_record(rec[0], rec[1], indices)
            except ValueError as e:
                if not line.endswith(b"\n"):
                    print("warning: %s:%d: skipping the cut-off last line" % (path, n), file=sys.stderr)
                    return
                raise ValueError("%s:%d: not a trace record (%s)" % (path, n, e))
            yield rec


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
        self.add_counts(np.bincount(ids, weights=weights, minlength=self.v.size))

    def add_counts(self, b):
        if b.size > self.v.size:
            self.v = np.concatenate([self.v, np.zeros(b.size - self.v.size, dtype=np.int64)])
        self.v[:b.size] += b.astype(np.int64)
