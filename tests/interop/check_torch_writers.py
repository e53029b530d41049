"""Loads the files Strata's PyTorch writers wrote (tests/unit/test_torch_writers.cpp, hidden case
[.torch_writers_interop]) with real torch and asserts their values: torch.load of torch.save
archives (weights_only True and False, a zip64 variant, objects rebuilt by REDUCE/NEWOBJ) and a
distributed checkpoint read with FileSystemReader and torch.distributed.checkpoint.load.

Usage: check_torch_writers.py <dir written by the C++ case>
"""
import argparse
import collections
import io
import os
import pickle
import signal
import sys
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata,
                                                   TensorStorageMetadata)

warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def same(t, values, dtype):
    expected = torch.tensor(values, dtype=dtype)
    check(t.dtype == dtype, f"dtype {t.dtype} != {dtype}")
    check(t.shape == expected.shape and torch.equal(t, expected), f"{t} != {expected}")


def check_tensors(obj, name):
    check(isinstance(obj, dict), f"{name}: root is {type(obj)}")
    same(obj["w"], [[-1, -0.5, 0], [0.5, 1, 1.5]], torch.float32)
    same(obj["w_tail"], [0.5, 1, 1.5], torch.float32)
    same(obj["w_col"], [-0.5, 1], torch.float32)
    check(obj["w_tail"].untyped_storage().data_ptr() == obj["w"].untyped_storage().data_ptr(),
          f"{name}: w_tail does not share w's storage")
    check(obj["w_col"].stride() == (3,) and obj["w_col"].storage_offset() == 1, f"{name}: w_col's view")
    same(obj["v"], [-1, 2**40, 7], torch.int64)
    same(obj["h"], [0.5, -1.25], torch.float16)
    same(obj["bf"], [[1, -2], [3.5, 0.125]], torch.bfloat16)
    same(obj["i"], [-7, 9], torch.int32)
    same(obj["u"], [0, 128, 255], torch.uint8)
    same(obj["b"], [True, False], torch.bool)
    meta = obj["meta"]
    expected_meta = {"iteration": 7, "name": "gpt \u00e9", "lr": 0.25, "big": 2**40, "neg": -3,
                     "shape": (1, 2), "none": None, "raw": b"\x00\xff", "flags": [True, False]}
    check(meta == expected_meta, f"{name}: meta {meta}")
    check(list(meta) == list(expected_meta), f"{name}: meta key order {list(meta)}")
    check(type(obj["od"]) is collections.OrderedDict and list(obj["od"].items()) == [("k", 1), ("j", 2)],
          f"{name}: od {obj['od']!r}")


def check_archives(out):
    for file in ("tensors.pt", "zip64.pt"):
        for weights_only in (True, False):
            check_tensors(torch.load(os.path.join(out, file), weights_only=weights_only), f"{file} weights_only={weights_only}")
    with open(os.path.join(out, "tensors.pt"), "rb") as f:
        check_tensors(torch.load(io.BytesIO(f.read()), weights_only=True), "tensors.pt from a buffer")
    check_tensors(torch.load(os.path.join(out, "tensors.pt"), mmap=True, weights_only=True), "tensors.pt mmap")
    obj = torch.load(os.path.join(out, "objects.pt"), weights_only=False)
    check(isinstance(obj["args"], argparse.Namespace) and vars(obj["args"]) == {"lr": 0.5, "name": "gpt"},
          f"objects.pt args {obj['args']!r}")
    check(obj["sig"] is signal.Signals.SIGTERM, f"objects.pt sig {obj['sig']!r}")
    check(type(obj["size"]) is torch.Size and obj["size"] == torch.Size([2, 3]), f"objects.pt size {obj['size']!r}")
    check(obj["dtype"] is torch.bfloat16, f"objects.pt dtype {obj['dtype']!r}")
    check(obj["set"] == {1, 2}, f"objects.pt set {obj['set']!r}")
    print("torch.load: tensors.pt, zip64.pt (weights_only True and False, buffer, mmap), objects.pt: ok")


def expected_dcp():
    a = torch.tensor([i * 0.5 - 2 for i in range(12)], dtype=torch.float32).reshape(4, 3)
    w = torch.tensor([(i % 5) - 2.5 for i in range(12)], dtype=torch.bfloat16).reshape(2, 2, 3)
    c = torch.tensor([5, -4, 3, -2, 2**40], dtype=torch.int64)
    return a, w, c


def check_dcp(path, with_strides):
    md = FileSystemReader(path).read_metadata()
    sdm = md.state_dict_metadata
    check(list(sdm) == ["a", "decoder.layers.self_attention._extra_state", "decoder.layers.w", "c",
                        "common_state/shard_0_1"], f"{path}: keys {list(sdm)}")
    check(isinstance(sdm["decoder.layers.self_attention._extra_state"], BytesStorageMetadata), f"{path}: bytes item")
    a_md = sdm["a"]
    check(isinstance(a_md, TensorStorageMetadata) and a_md.size == torch.Size([4, 3]), f"{path}: a {a_md}")
    check(a_md.chunks == [ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([2, 3])),
                          ChunkStorageMetadata(torch.Size([2, 0]), torch.Size([2, 3]))], f"{path}: a chunks {a_md.chunks}")
    p = a_md.properties
    check(p.dtype is torch.float32 and p.layout is torch.strided and p.requires_grad is False and
          p.memory_format is torch.contiguous_format and p.pin_memory is False, f"{path}: a properties {p}")
    if hasattr(p, "strides"):
        check(p.strides == ((3, 1) if with_strides else None), f"{path}: strides {p.strides}")
    check(sdm["decoder.layers.w"].properties.dtype is torch.bfloat16, f"{path}: w dtype")
    check(md.version == "1.0.0" and md.planner_data["c"] == ("c",), f"{path}: version/planner_data")
    check(md.storage_meta.checkpoint_id == path, f"{path}: storage_meta {md.storage_meta}")

    # The same tensors saved by torch itself: equal metadata (strides aside when not written).
    a, w, c = expected_dcp()
    ref_dir = path + "_torch"
    dcp.save({"c": c}, checkpoint_id=ref_dir, no_dist=True)
    ref = FileSystemReader(ref_dir).read_metadata()
    ours_c, ref_c = sdm["c"], ref.state_dict_metadata["c"]
    if not with_strides and hasattr(ref_c.properties, "strides"):
        ref_c.properties.strides = None
    check(ours_c == ref_c, f"{path}: c metadata {ours_c} != torch's {ref_c}")
    ours_info = [v for k, v in md.storage_data.items() if k.fqn == "c"][0]
    ref_info = list(ref.storage_data.values())[0]
    check(ours_info.length == ref_info.length, f"{path}: c item length {ours_info.length} != torch's {ref_info.length}")

    sd = {"a": torch.zeros(4, 3), "decoder.layers.w": torch.zeros(2, 2, 3, dtype=torch.bfloat16),
          "c": torch.zeros(5, dtype=torch.int64), "decoder.layers.self_attention._extra_state": io.BytesIO(),
          "common_state/shard_0_1": {}}
    dcp.load(sd, checkpoint_id=path, no_dist=True)
    check(torch.equal(sd["a"], a), f"{path}: a {sd['a']}")
    check(torch.equal(sd["decoder.layers.w"], w), f"{path}: w {sd['decoder.layers.w']}")
    check(torch.equal(sd["c"], c), f"{path}: c {sd['c']}")
    check(sd["decoder.layers.self_attention._extra_state"] is None, f"{path}: extra state {sd['decoder.layers.self_attention._extra_state']!r}")
    check(sd["common_state/shard_0_1"] == {"iteration": 2, "note": "hi"}, f"{path}: common {sd['common_state/shard_0_1']!r}")
    # .metadata is a plain pickle too.
    with open(os.path.join(path, ".metadata"), "rb") as f:
        check(pickle.load(f).state_dict_metadata == sdm, f"{path}: pickle.load of .metadata")
    print(f"dcp: {os.path.basename(path)} metadata and dcp.load: ok")


def main():
    out = sys.argv[1]
    print(f"torch {torch.__version__}")
    check_archives(out)
    check_dcp(os.path.join(out, "dcp"), with_strides=False)
    check_dcp(os.path.join(out, "dcp_strides"), with_strides=True)
    print("check_torch_writers: all checks passed")


if __name__ == "__main__":
    main()
