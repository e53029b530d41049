#!/usr/bin/python3
"""ctest routing_predictability: predictability.py on a synthetic trace with bf16 hidden states.

Routers are identities, so the predicted expert of a token is the one-hot position of its hidden
state. d:0 -> d:1 predicts [4,4,4,4,0,0,0,0] against the recorded [6,4,2,2,2,0,0,0]: cosine 0.875,
Spearman 28/sqrt(32*38) (average ranks), hot-1 overlap 1, 2 samples (two micro-batches; a third
has 4 tokens at d:1 and 8 at d:0, so it is skipped there). d:1 -> d:2 is exact (1, 1, 1) over 3. The MTP layers m0:0, m0:1
reuse layer numbers 0 and 1 and form their own pair. routing.py all runs the three analyses, and
still runs the others when predictability cannot (no router state). Unit checks of the router: sqrtsoftplus with
an expert bias (where Megatron's fallthrough to raw logits picks another expert) and group limits.
"""
import math
import os
import shutil
import tempfile

import numpy as np

from fixture import close, has_module, main, read_csv, record, run, write_trace
from moe_routing.predictability import router_topk
from moe_routing.router_state import state_to_safetensors, write_safetensors
from moe_routing.sidecar import SidecarWriter

E = 8


def onehot(ids):
    return np.eye(E, dtype=np.float32)[ids]


def build(d):
    os.makedirs(d)
    hs = SidecarWriter(os.path.join(d, "hidden_states_rank0.bin"))
    recs = []
    for mb in (0, 1, 2):
        ex = {"micro_batch": mb, "phase": "train"}
        t = 8 if mb < 2 else 4
        recs.append(record(0, 0, 0, [[0]] * 8, hs=hs.write(onehot([0, 1, 2, 3] * 2)), extra=ex))
        d1 = [0, 0, 1, 1, 1, 2, 5, 6][:t]
        recs.append(record(0, 1, 0, [[e] for e in [0, 0, 0, 1, 1, 2, 3, 4][:t]], hs=hs.write(onehot(d1)), extra=ex))
        recs.append(record(0, 2, 0, [[e] for e in d1], hs=hs.write(onehot(d1)), extra=ex))
        recs.append(record(0, 0, 0, [[7]] * 8, block="mtp", mtp_idx=0, hs=hs.write(onehot([7] * 8)), extra=ex))
        recs.append(record(0, 1, 0, [[7]] * 8, block="mtp", mtp_idx=0, hs=hs.write(onehot([3] * 8)), extra=ex))
    recs.append(record(0, 1, 0, [[5]] * 8, hs=hs.write(onehot([5] * 8)), extra={"micro_batch": 0, "phase": "eval"}))
    hs.close()
    write_trace(d, recs)
    ident = {"weight": np.eye(E, dtype=np.float32), "expert_bias": None, "topk": 1}
    state = {("decoder", None, l): dict(ident, score_function=fn)
             for l, fn in ((0, "sigmoid"), (1, "sigmoid"), (2, "softmax"))}
    state[("mtp", 0, 0)] = dict(ident, score_function="sigmoid")
    state[("mtp", 0, 1)] = dict(ident, score_function="sqrtsoftplus", expert_bias=np.zeros(E, np.float32))
    write_safetensors(os.path.join(d, "router_state_rank0.safetensors"), *state_to_safetensors(state))


def test_pairs():
    d = tempfile.mkdtemp()
    try:
        build(os.path.join(d, "t"))
        out = run("predictability.py", os.path.join(d, "t"), "--output-dir", os.path.join(d, "o"))
        rows = read_csv(os.path.join(d, "o", "predictability_per_layer.csv"))
        assert [(r["src"], r["dst"]) for r in rows] == [("d:0", "d:1"), ("d:1", "d:2"), ("m0:0", "m0:1")], out
        close(rows[0]["count_cosine"], 0.875)
        close(rows[0]["count_spearman"], 28 / math.sqrt(32 * 38))
        close(rows[0]["hot_overlap"], 1.0)
        assert [r["samples"] for r in rows] == ["2", "3", "3"]
        for r in rows[1:]:
            close(r["count_cosine"], 1.0); close(r["count_spearman"], 1.0); close(r["hot_overlap"], 1.0)
        assert "d:0 ->   d:1 |  0.875 |    0.803 |  1.000" in out, out
        if has_module("matplotlib"):
            assert os.path.getsize(os.path.join(d, "o", "predictability_per_layer.png")) > 1000
        out = run("predictability.py", os.path.join(d, "t"), "--layers", "2")
        assert "d:1 ->   d:2" in out and "d:0 ->" not in out, out
        out = run("routing.py", "all", os.path.join(d, "t"), "--output-dir", os.path.join(d, "all"), "--ep-size", "2")
        assert "(uniform baseline: 0.125," in out, out  # E = 8 from the safetensors header
        for name in ("concentration_per_layer.csv", "predictability_per_layer.csv", "ep_load_imbalance.csv"):
            assert os.path.exists(os.path.join(d, "all", name)), out
        os.remove(os.path.join(d, "t", "router_state_rank0.safetensors"))
        out = run("routing.py", "all", os.path.join(d, "t"), "--num-experts", "8", expect=1)
        assert "[WARNING] predictability: no router_state_rank*" in out and "EP load imbalance" in out, out
        out = run("predictability.py", os.path.join(d, "t"), expect=1)
        assert "strata: error: no router_state_rank*" in out, out
    finally:
        shutil.rmtree(d)


def test_router():
    info = {"weight": np.array([[4.0], [0.0]], np.float32), "expert_bias": np.array([0, 1.5], np.float32),
            "score_function": "sqrtsoftplus"}
    h = np.ones((1, 1), np.float32)
    # sqrt(softplus(4)) = 2.0045 < sqrt(softplus(0)) + 1.5 = 2.3326; raw logits + bias: 4 > 1.5
    assert router_topk(h, info, 1).tolist() == [[1]]
    grouped = {"weight": np.array([[0.9], [0.0], [0.6], [0.6], [0], [0], [0], [0]], np.float32),
               "expert_bias": None, "score_function": "softmax"}
    assert router_topk(h, grouped, 2).tolist() == [[0, 2]]
    grouped.update(num_groups=4, group_topk=1)  # group score: sum of the top-2 -> group 1 wins
    assert router_topk(h, grouped, 2).tolist() == [[2, 3]]


if __name__ == "__main__":
    main([test_router, test_pairs])
