"""bf16 sidecars: hidden_states_rank<R>.bin and logits_rank<R>.bin (docs/router_trace.md, "Files").

Raw concatenation of bfloat16 tensors, no header: little-endian uint16 bit patterns at each
record's <prefix>_offset, <prefix>_bytes (= 2 * prod(shape)), <prefix>_shape. The same layout
as Megatron-LM's load_hidden_states_for_record / load_logits_for_record. Values come back as
float32 (exact: every bf16 value is a float32).
"""
import os

import numpy as np

_FILES = {"hs": "hidden_states_rank%d.bin", "logit": "logits_rank%d.bin"}


def bf16_bits_to_f32(bits):
    """uint16 bf16 bit patterns -> float32 (the high half of the float32)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> bf16 bit patterns, round to nearest even (NaN stays a quiet NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def sidecar_path(trace_dir, rank, prefix="hs"):
    return os.path.join(trace_dir, _FILES[prefix] % rank)


def load_for_record(record, trace_dir, prefix="hs", handle=None):
    """The record's hidden states (prefix 'hs', [T, H]) or logits ('logit', [T, E]) as float32.

    handle: an open binary file of the right sidecar, to avoid reopening it per record."""
    if prefix + "_offset" not in record:
        raise ValueError("record has no %s_offset (traced without that sidecar)" % prefix)
    shape = tuple(record[prefix + "_shape"])
    nbytes = record[prefix + "_bytes"]
    if nbytes != 2 * int(np.prod(shape)):
        raise ValueError("%s_bytes %d does not match %s_shape %s" % (prefix, nbytes, prefix, list(shape)))
    f = handle or open(sidecar_path(trace_dir, record["rank"], prefix), "rb")
    try:
        f.seek(record[prefix + "_offset"])
        data = f.read(nbytes)
    finally:
        if handle is None:
            f.close()
    if len(data) != nbytes:
        raise ValueError("%s sidecar of rank %d ends before offset %d + %d bytes"
                         % (prefix, record["rank"], record[prefix + "_offset"], nbytes))
    return bf16_bits_to_f32(np.frombuffer(data, dtype="<u2")).reshape(shape)


class SidecarWriter:
    """Appends bf16 tensors and returns the record keys (tests, synthetic traces)."""

    def __init__(self, path):
        self.f = open(path, "wb")
        self.offset = 0

    def write(self, x, prefix="hs"):
        data = f32_to_bf16_bits(x).astype("<u2").tobytes()
        self.f.write(data)
        keys = {prefix + "_offset": self.offset, prefix + "_bytes": len(data),
                prefix + "_shape": list(np.shape(x))}
        self.offset += len(data)
        return keys

    def close(self):
        self.f.close()
