#!/usr/bin/python3
"""ctest routing_to_megatron: to_megatron.py writes Megatron-LM's router_state_rank<R>.pt.

torch.load gives a dict keyed by (block, mtp_idx, layer) tuples with exactly weight (f32 [E, H]),
expert_bias (None or f32 [E]), score_function and topk; predictability.py on the .pt files alone
gives the CSV it gives on the safetensors; without torch the script fails with a clear message.
Exits 77 (skipped) when torch does not import.
"""
import os
import shutil
import subprocess
import sys
import tempfile

from fixture import SCRIPTS, has_module, main, run
from test_predictability import build

NO_TORCH = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = ['to_megatron.py', sys.argv[1]]; "
            "runpy.run_path(%r, run_name='__main__')" % os.path.join(SCRIPTS, "to_megatron.py"))


def test_layout():
    import torch
    d = tempfile.mkdtemp()
    try:
        t = os.path.join(d, "t")
        build(t)
        run("predictability.py", t, "--output-dir", os.path.join(d, "a"))
        out = run("to_megatron.py", t)
        assert "router_state_rank0.pt" in out, out
        st = torch.load(os.path.join(t, "router_state_rank0.pt"))
        assert set(st) == {("decoder", None, 0), ("decoder", None, 1), ("decoder", None, 2), ("mtp", 0, 0), ("mtp", 0, 1)}
        for key, info in st.items():
            assert set(info) == {"weight", "expert_bias", "score_function", "topk"}, info
            assert info["weight"].dtype == torch.float32 and tuple(info["weight"].shape) == (8, 8)
            assert info["topk"] == 1 and isinstance(info["topk"], int)
        assert st[("decoder", None, 2)]["score_function"] == "softmax" and st[("decoder", None, 0)]["expert_bias"] is None
        assert st[("mtp", 0, 1)]["expert_bias"].dtype == torch.float32 and st[("mtp", 0, 1)]["score_function"] == "sqrtsoftplus"
        assert torch.equal(st[("decoder", None, 1)]["weight"], torch.eye(8))
        os.remove(os.path.join(t, "router_state_rank0.safetensors"))
        run("predictability.py", t, "--output-dir", os.path.join(d, "b"))
        with open(os.path.join(d, "a", "predictability_per_layer.csv")) as fa, \
                open(os.path.join(d, "b", "predictability_per_layer.csv")) as fb:
            assert fa.read() == fb.read()
    finally:
        shutil.rmtree(d)


def test_without_torch():
    d = tempfile.mkdtemp()
    try:
        p = subprocess.run(["/usr/bin/python3", "-c", NO_TORCH, d], capture_output=True, text=True)
        assert p.returncode == 1 and "strata: error: to_megatron.py needs torch" in p.stderr, p.stderr
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    if not has_module("torch"):
        print("skipped: torch does not import")
        sys.exit(77)
    main([test_layout, test_without_torch])
