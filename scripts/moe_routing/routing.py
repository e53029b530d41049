#!/usr/bin/python3
"""Routing analyses of a router trace: one or all of them (Megatron's analyze_routing.py, and more).

    routing.py concentration|predictability|load|all TRACE_DIR [options of that analysis]

`all` runs concentration, predictability and load in turn with TRACE_DIR, --output-dir,
--num-experts and --phase (and --top-k for predictability, --ep-size for load, as Megatron forwards
it); an analysis that fails (predictability on a trace without hidden states) is reported and the
others still run; the exit status is that of the first failure.
"""
import argparse
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from moe_routing import concentration, load, predictability
from moe_routing.common import run_main

ANALYSES = {"concentration": concentration, "predictability": predictability, "load": load}


def run_all(argv):
    p = argparse.ArgumentParser(prog="routing.py all")
    p.add_argument("trace_dir")
    p.add_argument("--output-dir")
    p.add_argument("--num-experts", type=int)
    p.add_argument("--top-k", type=int)
    p.add_argument("--ep-size", type=int)
    p.add_argument("--phase", choices=("train", "eval", "all"), default="train")
    a = p.parse_args(argv)
    common = [a.trace_dir, "--phase", a.phase]
    common += ["--output-dir", a.output_dir] if a.output_dir else []
    common += ["--num-experts", str(a.num_experts)] if a.num_experts else []
    extra = {"concentration": [], "predictability": ["--top-k", str(a.top_k)] if a.top_k else [],
             "load": ["--ep-size", str(a.ep_size)] if a.ep_size else []}
    rc = 0
    for name, mod in ANALYSES.items():
        print("\n" + "=" * 78 + "\n  %s\n" % name + "=" * 78, flush=True)
        try:
            r = mod.main(common + extra[name]) or 0
        except (OSError, ValueError, KeyError, RuntimeError, ImportError) as e:
            print("[WARNING] %s: %s" % (name, e), file=sys.stderr)
            r = 1
        rc = rc or r
    return rc


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in list(ANALYSES) + ["all"]:
        raise ValueError("usage: routing.py concentration|predictability|load|all TRACE_DIR [options]")
    if argv[0] == "all":
        return run_all(argv[1:])
    return ANALYSES[argv[0]].main(argv[1:])


if __name__ == "__main__":
    run_main(main)
