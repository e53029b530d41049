#!/usr/bin/python3
"""Strata's router state -> Megatron-LM's: router_state_rank<R>.pt next to each .safetensors.

    to_megatron.py TRACE_DIR

Each router_state_rank<R>.safetensors becomes router_state_rank<R>.pt: a torch.save'd dict keyed by
(block, mtp_idx, layer) with {"weight": f32 [E, H], "expert_bias": f32 [E] or None,
"score_function": str, "topk": int}, the layout Megatron's RouterTracer writes, so that
tools/moe_routing/analyze_routing_predictability.py reads a Strata trace. Needs torch
(python3-torch: scripts/setup.sh --bench).
"""
import glob
import os
import re
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from moe_routing.common import run_main
from moe_routing.router_state import read_safetensors, state_from_safetensors


def convert(trace_dir):
    try:
        import torch
    except ImportError:
        raise ImportError("to_megatron.py needs torch (install python3-torch: scripts/setup.sh --bench)")
    paths = sorted(glob.glob(os.path.join(trace_dir, "router_state_rank*.safetensors")))
    if not paths:
        raise FileNotFoundError("no router_state_rank*.safetensors in %s" % trace_dir)
    written = []
    for path in paths:
        state = state_from_safetensors(*read_safetensors(path))
        out = {}
        for key, info in state.items():
            bias = info["expert_bias"]
            out[key] = {"weight": torch.from_numpy(info["weight"].copy()),
                        "expert_bias": None if bias is None else torch.from_numpy(bias.copy()),
                        "score_function": info["score_function"], "topk": info["topk"]}
        dst = re.sub(r"\.safetensors$", ".pt", path)
        torch.save(out, dst)
        written.append(dst)
    return written


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        raise ValueError("usage: to_megatron.py TRACE_DIR")
    for path in convert(argv[0]):
        print("Wrote %s" % path)
    return 0


if __name__ == "__main__":
    run_main(main)
