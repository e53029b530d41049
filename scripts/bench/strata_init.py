"""Loads the initial state `strata bench train` writes for its PyTorch reference
(apps/strata/bench_train_moe.h): a safetensors file with Strata's initial parameters under their
Megatron-Core names and the batches of every benchmarked step ("bench.tokens", "bench.labels"
[steps, b, s] int64, "bench.loss_mask" f32). Copies every parameter into the reference model
(scripts/bench/gpt_train_torch.py); linear_qkv is reordered from Megatron's per-head
[q_h; k_h; v_h] rows to the reference's [q; k; v]. Every file tensor must be used and every model
parameter set, or it is an error naming the tensor."""
import json
import struct

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        lo, hi = meta["data_offsets"]
        arr = np.frombuffer(data, dtype=DTYPES[meta["dtype"]], count=(hi - lo) // np.dtype(DTYPES[meta["dtype"]]).itemsize,
                            offset=lo)
        out[name] = torch.from_numpy(arr.reshape(meta["shape"]).copy())
    return out


def qkv_rows(w, heads):  # [heads, 3, hd, ...] -> [3, heads, hd, ...]
    return w.reshape(heads, 3, -1, *w.shape[1:]).transpose(0, 1).reshape(w.shape)


def parameter_map(model, heads):
    """Strata name -> (reference parameter, transform)."""
    m, ident = {}, (lambda t: t)
    m["embedding.word_embeddings.weight"] = (model.wte.weight, ident)
    m["embedding.position_embeddings.weight"] = (model.wpe.weight, ident)
    m["decoder.final_layernorm.weight"] = (model.ln_f.weight, ident)
    m["decoder.final_layernorm.bias"] = (model.ln_f.bias, ident)
    for i, blk in enumerate(model.blocks):
        p = "decoder.layers.%d." % i
        qkv = lambda t: qkv_rows(t, heads)
        for kind in ("weight", "bias"):
            m[p + "self_attention.linear_qkv.layer_norm_" + kind] = (getattr(blk.ln1, kind), ident)
            m[p + "mlp.linear_fc1.layer_norm_" + kind] = (getattr(blk.ln2, kind), ident)
            if getattr(blk.qkv, kind) is not None:  # no linear biases: add_bias_linear false
                m[p + "self_attention.linear_qkv." + kind] = (getattr(blk.qkv, kind), qkv)
                m[p + "self_attention.linear_proj." + kind] = (getattr(blk.proj, kind), ident)
        mlp = blk.mlp
        dense = mlp if not hasattr(mlp, "router") else mlp.shared
        dp = p + ("mlp." if dense is mlp else "mlp.shared_experts.")
        if dense is not None:
            for kind in ("weight", "bias"):
                if getattr(dense.fc1, kind) is not None:
                    m[dp + "linear_fc1." + kind] = (getattr(dense.fc1, kind), ident)
                    m[dp + "linear_fc2." + kind] = (getattr(dense.fc2, kind), ident)
        if hasattr(mlp, "router"):
            m[p + "mlp.router.weight"] = (mlp.router, ident)
            for e in range(len(mlp.fc1)):
                m[p + "mlp.experts.linear_fc1.weight%d" % e] = (mlp.fc1[e], ident)
                m[p + "mlp.experts.linear_fc2.weight%d" % e] = (mlp.fc2[e], ident)
            if mlp.gate is not None:
                m[p + "mlp.shared_experts.gate_weight"] = (mlp.gate, ident)
    return m


def load(path, model, heads):
    """Copies the parameters into `model`; returns (tokens, labels, loss_mask) [steps, b, s]."""
    t = read_safetensors(path)
    m = parameter_map(model, heads)
    for name, tensor in t.items():
        if name.startswith("bench."):
            continue
        if name not in m:
            raise SystemExit("strata_init: %s: the reference has no parameter for '%s'" % (path, name))
        param, transform = m.pop(name)
        if tuple(param.shape) != tuple(tensor.shape):
            raise SystemExit("strata_init: '%s' is %s in the file, %s in the reference" %
                             (name, list(tensor.shape), list(param.shape)))
        with torch.no_grad():
            param.copy_(transform(tensor.to(param.dtype)))
    if m:
        raise SystemExit("strata_init: %s lacks %s" % (path, ", ".join(sorted(m))))
    return t["bench.tokens"], t["bench.labels"], t["bench.loss_mask"]
