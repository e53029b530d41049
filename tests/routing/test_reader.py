#!/usr/bin/python3
"""ctest routing_reader: the trace reader, bf16 sidecars and router state files.

A hand-written Megatron-LM trace (json.dumps spacing, an MTP record, hidden-state and logit
sidecars, a router_state_rank0.pt when torch imports) is read: records, layer keys, tensors. The
numpy fast path equals json.loads on Megatron's and Strata's spellings (and falls back on
lines it cannot prove). bf16: exact values round-trip, rounding is to nearest even, bit patterns
equal torch's bfloat16 when torch imports. Safetensors router state round-trips in the naming of
docs/router_trace.md.
"""
import json
import os
import shutil
import tempfile

import numpy as np

from fixture import has_module, main
from moe_routing import sidecar, trace
from moe_routing.router_state import (load_router_state, read_safetensors, state_to_safetensors,
                                      write_safetensors)

MEGATRON_TRACE = """\
{"step": 0, "stage": "pre_dispatch", "block": "decoder", "layer": 0, "rank": 0, "num_tokens": 2, "topk": 2, "hs_offset": 0, "hs_bytes": 12, "hs_shape": [2, 3], "logit_offset": 0, "logit_bytes": 16, "logit_shape": [2, 4], "top_indices": [[3, 1], [0, 2]]}
{"step": 0, "stage": "pre_dispatch", "block": "decoder", "layer": 1, "rank": 0, "num_tokens": 2, "topk": 2, "hs_offset": 12, "hs_bytes": 12, "hs_shape": [2, 3], "top_indices": [[1, 2], [2, 1]]}
{"step": 0, "stage": "pre_dispatch", "block": "mtp", "layer": 0, "rank": 0, "num_tokens": 1, "topk": 2, "mtp_idx": 0, "top_indices": [[0, 3]]}
"""

STRATA_LINES = [
    b'{"step":4,"stage":"pre_dispatch","block":"decoder","layer":7,"rank":1,"num_tokens":3,"topk":2,'
    b'"top_indices":[[10,2],[3,11],[0,1]],"micro_batch":2,"phase":"eval","dropped":[[1,11],[2,0]]}',
    b'{"step":0,"stage":"pre_dispatch","block":"decoder","layer":0,"rank":0,"num_tokens":0,"topk":2,"top_indices":[]}',
    b'{"step":0,"layer":0,"rank":0,"num_tokens":2,"topk":2,"top_indices":[[1, 2] , [3, 4] ]}',
    b'{"step":0,"layer":0,"rank":0,"num_tokens":3,"topk":2,"top_indices":[[1,2],[3,4]]}',
]


def test_megatron_trace():
    d = tempfile.mkdtemp()
    try:
        with open(os.path.join(d, "router_trace_rank0.jsonl"), "w") as f:
            f.write(MEGATRON_TRACE)
        hs = np.array([[1, -2, 0.5], [3, 0.25, -0.125], [7, 8, 9], [-1, -1, 2]], np.float32)
        logits = np.arange(8, dtype=np.float32).reshape(2, 4) / 4
        sidecar.f32_to_bf16_bits(hs).astype("<u2").tofile(os.path.join(d, "hidden_states_rank0.bin"))
        sidecar.f32_to_bf16_bits(logits).astype("<u2").tofile(os.path.join(d, "logits_rank0.bin"))
        recs = list(trace.iter_records(d))
        with open(os.path.join(d, "router_trace_rank1.jsonl"), "w") as f:
            f.write(MEGATRON_TRACE.splitlines()[2] + "\n" + MEGATRON_TRACE.splitlines()[1][:60])
        assert [m["layer"] for m, _ in trace.iter_records(d)] == [0, 1, 0, 0]  # cut-off line skipped
        with open(os.path.join(d, "router_trace_rank1.jsonl"), "w") as f:
            f.write(MEGATRON_TRACE.splitlines()[1][:60] + "\n")
        try:
            list(trace.iter_records(d))
            raise AssertionError("a bad line in the middle was accepted")
        except ValueError as e:
            assert "router_trace_rank1.jsonl:1: not a trace record" in str(e), e
        os.remove(os.path.join(d, "router_trace_rank1.jsonl"))
        assert [trace.layer_key(m) for m, _ in recs] == [("decoder", None, 0), ("decoder", None, 1), ("mtp", 0, 0)]
        assert [t.tolist() for _, t in recs] == [[[3, 1], [0, 2]], [[1, 2], [2, 1]], [[0, 3]]]
        assert [trace.key_label(trace.layer_key(m)) for m, _ in recs] == ["d:0", "d:1", "m0:0"]
        assert (sidecar.load_for_record(recs[0][0], d) == hs[:2]).all()
        assert (sidecar.load_for_record(recs[1][0], d) == hs[2:]).all()
        assert (sidecar.load_for_record(recs[0][0], d, "logit") == logits).all()
        if has_module("torch"):
            import torch
            torch.save({("decoder", None, 0): {"weight": torch.ones(4, 3), "expert_bias": None,
                                                "score_function": "softmax", "topk": 2},
                        ("mtp", 0, 0): {"weight": torch.zeros(4, 3), "expert_bias": torch.arange(4.0),
                                        "score_function": "sigmoid", "topk": 2}},
                       os.path.join(d, "router_state_rank0.pt"))
            st = load_router_state(d)
            assert sorted(st, key=trace.key_order) == [("decoder", None, 0), ("mtp", 0, 0)]
            assert st[("mtp", 0, 0)]["expert_bias"].tolist() == [0, 1, 2, 3]
            assert st[("decoder", None, 0)]["weight"].shape == (4, 3) and st[("decoder", None, 0)]["topk"] == 2
        else:
            print("skip: .pt router state (torch does not import)")
    finally:
        shutil.rmtree(d)


def test_fast_path_equals_json():
    for line in MEGATRON_TRACE.encode().splitlines() + STRATA_LINES[:3]:
        meta, top = trace.parse_line(line)
        ref = json.loads(line)
        assert top.tolist() == ref.pop("top_indices") and meta == ref, line
        assert list(meta) == [k for k in json.loads(line) if k != "top_indices"]
    meta, top = trace.parse_line(STRATA_LINES[0])
    assert meta["dropped"] == [[1, 11], [2, 0]] and meta["phase"] == "eval" and meta["micro_batch"] == 2
    assert top.shape == (3, 2) and trace.parse_line(STRATA_LINES[1])[1].shape == (0, 2)
    # num_tokens disagrees with the list: json.loads' result, whatever the fast path parsed
    assert trace.parse_line(STRATA_LINES[3])[1].tolist() == [[1, 2], [3, 4]]
    rng = np.random.default_rng(1)
    for seps in ((", ", ": "), (",", ":")):
        for hi in (10, 1000, 70000):
            top = rng.integers(0, hi, size=(300, 6)).tolist()
            line = json.dumps({"step": 1, "layer": 2, "rank": 0, "num_tokens": 300, "topk": 6,
                               "top_indices": top, "micro_batch": 0}, separators=seps).encode()
            j, k = trace._span(line)
            assert trace._parse_ids(line, j, k, 300, 6).tolist() == top  # the fast path took it
            assert trace.parse_line(line)[1].tolist() == top
    for t, bad in ((2, b'[[1, 2, 3], [4]]}'), (2, b'[[1, 2], 3, [4]]}'), (2, b'[[1, 2], [3, true, 4]]}')):
        line = b'{"step": 0, "layer": 0, "rank": 0, "num_tokens": %d, "topk": 2, "top_indices": %s' % (t, bad)
        j, k = trace._span(line)
        assert trace._parse_ids(line, j, k, t, 2) is None
        try:
            trace.parse_line(line)
            raise AssertionError("accepted %r" % bad)
        except ValueError:
            pass
    # Found by tests/fuzz/fuzz_router_trace.py: a line with the key twice (json.loads keeps the last
    # value; the fast path had taken the first).
    twice = b'{"step": 0, "layer": 0, "num_tokens": 1, "topk": 2, "top_indices": [[1, 2]], "top_indices": [[3, 4]]}'
    assert trace.parse_line(twice)[1].tolist() == [[3, 4]]
    for ids in (b"[[-1, 2]]", b"[[1.0, 2]]", b"[[1e0, 2]]", b"[[1,\t2]]", b"[[ 1 , 2 ]]"):
        line = b'{"step": 0, "layer": 0, "rank": 0, "num_tokens": 1, "topk": 2, "top_indices": %s}' % ids
        assert trace.parse_line(line)[1].tolist() == json.loads(line)["top_indices"], ids


def test_bf16():
    exact = np.array([0.0, -0.0, 1.0, -2.5, 3.140625, 2.0 ** -130, 65280.0, np.inf, -np.inf], np.float32)
    assert (sidecar.bf16_bits_to_f32(sidecar.f32_to_bf16_bits(exact)).view(np.uint32) == exact.view(np.uint32)).all()
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, np.nan], np.float32)
    y = sidecar.bf16_bits_to_f32(sidecar.f32_to_bf16_bits(x))
    assert y[:3].tolist() == [1.0, 1 + 2 ** -6, 1 + 2 ** -7] and np.isnan(y[3])
    if has_module("torch"):
        import torch
        r = np.random.default_rng(0).standard_normal(10000).astype(np.float32) * 100
        t = torch.from_numpy(r).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        assert (t == sidecar.f32_to_bf16_bits(r)).all()


def test_safetensors_state():
    d = tempfile.mkdtemp()
    try:
        st = {("decoder", None, 3): {"weight": np.arange(6, dtype=np.float32).reshape(3, 2), "expert_bias": None,
                                     "score_function": "softmax", "topk": 2},
              ("mtp", 1, 0): {"weight": np.ones((3, 2), np.float32), "expert_bias": np.array([1, 2, 3], np.float32),
                              "score_function": "sqrtsoftplus", "topk": 1, "num_groups": 3, "group_topk": 1}}
        write_safetensors(os.path.join(d, "router_state_rank0.safetensors"), *state_to_safetensors(st))
        tensors, meta = read_safetensors(os.path.join(d, "router_state_rank0.safetensors"))
        assert sorted(tensors) == ["decoder..3.weight", "mtp.1.0.expert_bias", "mtp.1.0.weight"]
        assert meta["decoder..3.score_function"] == "softmax" and meta["mtp.1.0.topk"] == "1"
        back = load_router_state(d)
        assert back[("decoder", None, 3)]["weight"].tolist() == [[0, 1], [2, 3], [4, 5]]
        assert back[("decoder", None, 3)]["expert_bias"] is None and back[("decoder", None, 3)]["num_groups"] is None
        assert back[("mtp", 1, 0)]["expert_bias"].tolist() == [1, 2, 3] and back[("mtp", 1, 0)]["group_topk"] == 1
    finally:
        shutil.rmtree(d)


def test_bad_records():
    """Records the analyses cannot read are errors naming the file and line, never another exception
    (found by tests/fuzz/fuzz_router_trace.py: a record without top_indices was an AttributeError
    deep in concentration.py, an id of 1e9 asked for an 8 GB count vector)."""
    good = {"step": 0, "layer": 1, "rank": 0, "num_tokens": 2, "topk": 2, "top_indices": [[1, 2], [3, 4]]}
    bad = [
        ({"top_indices": None}, 'no "top_indices"'), ({"top_indices": [[1, None], [3, 4]]}, "integer expert ids"),
        ({"top_indices": [[1.5, 2], [3, 4]]}, "integer expert ids"),
        ({"top_indices": [[1e30, 2], [3, 4]]}, "integer expert ids"), ({"top_indices": 5}, "not a list"),
        ({"top_indices": [[1, 2], [3, 2 ** 70]]}, "integer expert ids"),
        ({"top_indices": [[1, 2], [3, 10 ** 9]]}, "outside 0..65535"), ({"top_indices": [[1, 2], [3, -1]]}, "outside"),
        ({"layer": "x"}, '"layer" is "x"'), ({"step": None}, '"step" is null'), ({"block": 3}, "not a string"),
        ({"num_tokens": 3}, "not [num_tokens][topk]"), ({"dropped": [[0]]}, "pairs"),
        ({"dropped": [[0, 70000]]}, "dropped is outside"), ({"dropped": [[2, 1]]}, "a token in dropped"),
        ({"dropped": [[10 ** 30, 1]]}, "a token in dropped"),
    ]
    d = tempfile.mkdtemp()
    try:
        path = os.path.join(d, "router_trace_rank0.jsonl")
        lines = [json.dumps(dict(good, **edit)) for edit, _ in bad] + ["[1, 2]", '[{"top_indices": [[1]]}]']
        whys = [why for _, why in bad] + ["not list", "not list"]
        for line, why in zip(lines, whys):
            with open(path, "w") as f:
                f.write(json.dumps(good) + "\n" + line + "\n")
            try:
                list(trace.iter_file(path))
            except ValueError as e:
                assert "%s:2: not a trace record" % path in str(e), e
                assert why in str(e) or why == "not list", (why, str(e))
            else:
                raise AssertionError("accepted: " + line)
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main([test_megatron_trace, test_fast_path_equals_json, test_bf16, test_safetensors_state, test_bad_records])
