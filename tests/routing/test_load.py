#!/usr/bin/python3
"""ctest routing_load: load.py (EP imbalance, co-activation, drift) on a synthetic trace.

Four experts, EP size 2 (experts 0-1 on EP rank 0, 2-3 on rank 1), two trace ranks merged by
step. d:0 routes every token to {0, 1} at step 0 (EP loads 16/0: imbalance 2) and to {0, 2} at
step 1 (8/8: 1; distribution [.5,.5,0,0] -> [.5,0,.5,0]: JS 0.5 bits, L1 1); co-activation (0,1)
and (0,2) 8 tokens each; MTP layer 0 stays apart; --after-drop removes two dropped pairs of
expert 2 (loads 8/6: 8/7); an eval record is left out; a file out of step order is an error.
"""
import os
import shutil
import tempfile

from fixture import close, has_module, main, read_csv, record, run, write_trace


def build(d, reorder=False):
    ex = {"micro_batch": 0, "phase": "train"}
    recs = []
    for rank, t in ((0, 3), (1, 5)):
        recs.append(record(0, 0, rank, [[0, 1]] * t, extra=ex))
        drop = {"dropped": [[0, 2], [1, 2]]} if rank == 0 else {}
        recs.append(record(1, 0, rank, [[0, 2]] * t, extra=dict(ex, **drop)))
        recs.append(record(1, 0, rank, [[3, 3]] * 9, extra={"micro_batch": 0, "phase": "eval"}))
    recs.insert(1, record(0, 0, 0, [[3, 2]] * 2, block="mtp", mtp_idx=0, extra=ex))
    if reorder:
        recs[0], recs[2] = recs[2], recs[0]
    write_trace(d, recs)


def test_known_loads():
    d = tempfile.mkdtemp()
    try:
        build(os.path.join(d, "t"))
        out = run("load.py", os.path.join(d, "t"), "--ep-size", "2", "--num-experts", "4",
                  "--output-dir", os.path.join(d, "o"))
        imb = read_csv(os.path.join(d, "o", "ep_load_imbalance.csv"))
        got = [(r["step"], r["layer_label"], r["num_tokens"], r["assignments"], r["max_rank_assignments"],
                r["hottest_ep_rank"]) for r in imb]
        assert got == [("0", "d:0", "8", "16", "16", "0"), ("0", "m0:0", "2", "4", "4", "1"),
                       ("1", "d:0", "8", "16", "8", "0")], got
        close(imb[0]["imbalance"], 2.0); close(imb[1]["imbalance"], 2.0); close(imb[2]["imbalance"], 1.0)
        drift = read_csv(os.path.join(d, "o", "load_drift.csv"))
        assert [(r["step"], r["layer_label"]) for r in drift] == [("0", "d:0"), ("0", "m0:0"), ("1", "d:0")]
        close(drift[0]["js_vs_first"], 0.0); close(drift[2]["js_vs_first"], 0.5); close(drift[2]["l1_vs_first"], 1.0)
        co = [(r["block"], r["expert_a"], r["expert_b"], r["count"])
              for r in read_csv(os.path.join(d, "o", "coactivation_per_layer.csv"))]
        assert co == [("decoder", "0", "1", "8"), ("decoder", "0", "2", "8"), ("mtp", "2", "3", "2")], co
        assert "d:0 |  train |     2 |  1.500 |  2.000 |    0.5000" in out, out
        if has_module("matplotlib"):
            for png in ("ep_load_imbalance.png", "load_drift.png", "coactivation_d_0.png", "coactivation_m0_0.png"):
                assert os.path.getsize(os.path.join(d, "o", png)) > 1000, png
        run("load.py", os.path.join(d, "t"), "--ep-size", "2", "--after-drop", "--output-dir", os.path.join(d, "o"))
        imb = read_csv(os.path.join(d, "o", "ep_load_imbalance.csv"))
        assert imb[2]["assignments"] == "14"
        close(imb[2]["imbalance"], 8 / 7)
        out = run("load.py", os.path.join(d, "t"), "--ep-size", "3", expect=1)
        assert "strata: error: --ep-size 3 does not divide the 4 experts" in out, out
        build(os.path.join(d, "r"), reorder=True)
        out = run("load.py", os.path.join(d, "r"), expect=1)
        assert "is not in step order (step 0 after 1)" in out, out
    finally:
        shutil.rmtree(d)


def test_largest_expert_id():
    """Expert 65535 (the reader's largest id): co-activation is counted sparsely, so the analysis
    needs kilobytes, not the 32 GiB of a dense 65536 x 65536 count (found by
    tests/fuzz/fuzz_router_trace.py's memory limit); the report and CSV name the pair."""
    d = tempfile.mkdtemp()
    try:
        write_trace(d, [record(0, 0, 0, [[0, 65535], [0, 65535], [1, 2]])])
        out = run("load.py", d, "--phase", "all", "--ep-size", "1", "--output-dir", os.path.join(d, "o"))
        assert "experts 0+65535 | 0.667" in out, out
        assert "Co-activation plots skipped: 65536 experts" in out or "matplotlib not available" in out, out
        rows = read_csv(os.path.join(d, "o", "coactivation_per_layer.csv"))
        assert [(r["expert_a"], r["expert_b"], r["count"]) for r in rows] == [("0", "65535", "2"), ("1", "2", "1")]
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main([test_known_loads, test_largest_expert_id])
