"""Router state of a trace: Strata's router_state_rank<R>.safetensors and Megatron-LM's
router_state_rank<R>.pt (docs/router_trace.md, "Router state").

Both load into {(block, mtp_idx, layer): {"weight": f32 [E, H], "expert_bias": f32 [E] or None,
"score_function": str, "topk": int, "num_groups": int or None, "group_topk": int or None}}.
Every rank file is merged; the first occurrence of a key wins (Megatron's merge). The safetensors
names: "<block>.<mtp_idx or ''>.<layer>.weight" / ".expert_bias" (F32), metadata
"<same prefix>.score_function" / ".topk" (and optionally ".num_groups", ".group_topk").
The .pt files need torch (imported only when such a file is read).
"""
import glob
import json
import os
import struct

import numpy as np

_INT_META = ("topk", "num_groups", "group_topk")


def state_prefix(key):
    block, mtp_idx, layer = key
    return "%s.%s.%d" % (block, "" if mtp_idx is None else mtp_idx, layer)


def parse_prefix(prefix):
    block, mtp, layer = prefix.split(".")
    return (block, int(mtp) if mtp != "" else None, int(layer))


def read_header(path):
    """The JSON header of a safetensors file (tensor entries and __metadata__), without the data."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def num_experts(state_dir):
    """The largest expert count (weight rows) of a directory's router state, or None without one;
    reads only the safetensors headers (a .pt state is loaded, when torch imports)."""
    st = sorted(glob.glob(os.path.join(state_dir, "router_state_rank*.safetensors")))
    rows = [info["shape"][0] for p in st for name, info in read_header(p).items() if name.endswith(".weight")]
    if not st and glob.glob(os.path.join(state_dir, "router_state_rank*.pt")):
        try:
            rows = [info["weight"].shape[0] for info in load_router_state(state_dir).values()]
        except ImportError:
            return None
    return max(rows) if rows else None


def read_safetensors(path):
    """(tensors {name: float32 ndarray}, metadata {str: str}); F32 tensors only."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError("%s: tensor %s is %s, expected F32" % (path, name, info["dtype"]))
        b, e = info["data_offsets"]
        tensors[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"]).copy()
    return tensors, meta


def write_safetensors(path, tensors, meta):
    header, blobs, off = {"__metadata__": dict(meta)}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def state_to_safetensors(state):
    """{key: info} -> (tensors, metadata) in Strata's naming."""
    tensors, meta = {}, {}
    for key, info in state.items():
        p = state_prefix(key)
        tensors[p + ".weight"] = info["weight"]
        if info.get("expert_bias") is not None:
            tensors[p + ".expert_bias"] = info["expert_bias"]
        meta[p + ".score_function"] = str(info["score_function"])
        for m in _INT_META:
            if info.get(m) is not None:
                meta[p + "." + m] = str(int(info[m]))
    return tensors, meta


def state_from_safetensors(tensors, meta):
    state = {}
    for name, a in tensors.items():
        prefix, field = name.rsplit(".", 1)
        info = state.setdefault(parse_prefix(prefix), {"expert_bias": None})
        info[field] = a
    for key, info in state.items():
        p = state_prefix(key)
        if "weight" not in info:
            raise ValueError("router state %s has no weight" % p)
        info["score_function"] = meta.get(p + ".score_function")
        for m in _INT_META:
            info[m] = int(meta[p + "." + m]) if p + "." + m in meta else None
    return state


def _from_pt(path):
    import torch  # only for Megatron's .pt router state

    raw = torch.load(path, map_location="cpu")
    state = {}
    for key, info in raw.items():
        if not isinstance(key, (tuple, list)):
            key = ("decoder", None, int(key))  # older Megatron files: the bare layer number
        bias = info.get("expert_bias")
        state[tuple(key)] = {
            "weight": info["weight"].float().numpy(),
            "expert_bias": None if bias is None else bias.float().numpy(),
            "score_function": info.get("score_function"),
            "topk": info.get("topk"), "num_groups": None, "group_topk": None}
    return state


def load_router_state(state_dir):
    """Merged router state of a directory: the .safetensors files, else the .pt files."""
    st = sorted(glob.glob(os.path.join(state_dir, "router_state_rank*.safetensors")))
    pt = sorted(glob.glob(os.path.join(state_dir, "router_state_rank*.pt")))
    if not st and not pt:
        raise FileNotFoundError("no router_state_rank*.safetensors or router_state_rank*.pt in %s "
                                "(trace with moe_routing_trace_dump_weights)" % state_dir)
    merged = {}
    for path in st or pt:
        part = state_from_safetensors(*read_safetensors(path)) if st else _from_pt(path)
        for key, info in part.items():
            merged.setdefault(key, info)
    return merged
