#!/usr/bin/python3
"""ctest routing_concentration: concentration.py on a synthetic trace with a known pattern.

Decoder layer 0 always picks experts {0, 1}; decoder layer 1 alternates {2, 3} / {4, 5}; the MTP
layer (also layer number 0) picks {7, 6}, so it must stay apart from d:0. A step holding a single
layer is skipped (Megatron's "full pass" rule), evaluation records are dropped by default, and
--decode-only keeps the steps whose last record has <= 64 tokens. Coverage, CSVs and PNGs are
checked against hand-computed values; the frequencies equal those of the reference loop
scripts/bench/routing_concentration_loop.py on a random trace.
"""
import os
import shutil
import tempfile

import numpy as np

from fixture import SRC, close, has_module, main, read_csv, record, run, write_trace

E = 8


def known_trace(d, compact=False):
    recs = []
    for rank in (0, 1):
        for step in (0, 1):
            t = 4 if step == 0 else 100  # step 1 is not a decode step (100 > 64 tokens)
            recs.append(record(step, 0, rank, [[0, 1]] * t, extra={"micro_batch": 0, "phase": "train"}))
            recs.append(record(step, 1, rank, [[2, 3], [4, 5]] * (t // 2), extra={"micro_batch": 0, "phase": "train"}))
            recs.append(record(step, 0, rank, [[7, 6]] * t, block="mtp", mtp_idx=0, extra={"micro_batch": 0, "phase": "train"}))
            recs.append(record(step, 1, rank, [[5, 5]] * 3, extra={"micro_batch": 0, "phase": "eval"}))
        recs.append(record(2, 1, rank, [[0, 1]] * 9))  # a single-layer step: skipped
    write_trace(d, recs, compact)


def test_known_pattern():
    d = tempfile.mkdtemp()
    try:
        for compact in (False, True):
            known_trace(os.path.join(d, "t"), compact)
            out = run("concentration.py", os.path.join(d, "t"), "--output-dir", os.path.join(d, "o"),
                      "--num-experts", str(E), "--n-values", "1,2,4")
            assert "Accepted records: 12; skipped: 2" in out, out
            assert "Layers found: 3  (d:0..m0:0)" in out, out
            rows = {r["layer_label"]: r for r in read_csv(os.path.join(d, "o", "concentration_per_layer.csv"))}
            assert list(rows) == ["d:0", "d:1", "m0:0"], rows
            assert rows["d:0"]["num_tokens"] == "208" and rows["d:0"]["unique_experts"] == "2"
            assert rows["d:0"]["mtp_idx"] == "None" and rows["m0:0"]["mtp_idx"] == "0"
            close(rows["d:0"]["top1"], 0.5); close(rows["d:0"]["top2"], 1.0)
            close(rows["d:1"]["top1"], 0.25); close(rows["d:1"]["top2"], 0.5); close(rows["d:1"]["top4"], 1.0)
            close(rows["m0:0"]["top1"], 0.5)
            # aggregate: mean top-1 = (0.5 + 0.25 + 0.5) / 3, baseline 1/8
            assert "Mean top-1 coverage: 0.417  (uniform baseline: 0.125, ratio: 3.33" in out, out
            assert "  d:1 |    208 |    4 | 0.250 | 0.500 | 1.000 | 0.250" in out, out
            freq = read_csv(os.path.join(d, "o", "expert_frequencies_per_layer.csv"))
            got = {(r["block"], r["layer"], r["expert_id"]): int(r["count"]) for r in freq}
            assert got[("decoder", "0", "0")] == 208 and got[("mtp", "0", "7")] == 208
            assert got[("decoder", "1", "2")] == 104 and ("decoder", "1", "0") not in got
            if has_module("matplotlib"):
                for png in ("coverage_curve.png", "expert_layer_heatmap.png"):
                    with open(os.path.join(d, "o", png), "rb") as f:
                        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
            shutil.rmtree(os.path.join(d, "o"))
        out = run("concentration.py", os.path.join(d, "t"), "--decode-only", "--num-experts", str(E))
        assert "Accepted records: 6; skipped: 8" in out, out
        out = run("concentration.py", os.path.join(d, "t"), "--phase", "all", "--num-experts", str(E))
        assert "Accepted records: 16; skipped: 2" in out, out
    finally:
        shutil.rmtree(d)


def test_matches_reference_loop():
    rng = np.random.default_rng(3)
    d = tempfile.mkdtemp()
    try:
        recs = []
        for step in range(3):
            for layer in range(4):
                for rank in (0, 1):
                    top = np.argsort(rng.random((50, 16)) ** np.arange(1, 17), axis=1)[:, :3]
                    recs.append(record(step, layer, rank, top.tolist()))
        write_trace(os.path.join(d, "t"), recs)
        run("concentration.py", os.path.join(d, "t"), "--output-dir", os.path.join(d, "a"))
        import subprocess
        subprocess.run(["/usr/bin/python3", os.path.join(SRC, "scripts", "bench", "routing_concentration_loop.py"),
                        os.path.join(d, "t"), "--output-dir", os.path.join(d, "b")], check=True, capture_output=True)
        for name in ("expert_frequencies_per_layer.csv", "concentration_per_layer.csv"):
            with open(os.path.join(d, "a", name)) as fa, open(os.path.join(d, "b", name)) as fb:
                assert fa.read() == fb.read(), name
    finally:
        shutil.rmtree(d)


def test_errors():
    d = tempfile.mkdtemp()
    try:
        out = run("concentration.py", d, expect=1)
        assert "strata: error: no router_trace_rank*.jsonl" in out, out
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main([test_known_pattern, test_matches_reference_loop, test_errors])
