"""Helpers of the routing-tool tests: trace records in Megatron's and Strata's spelling, running
the scripts with /usr/bin/python3, reading their CSVs."""
import csv
import json
import os
import subprocess
import sys

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = os.path.join(SRC, "scripts", "moe_routing")
sys.path.insert(0, os.path.join(SRC, "scripts"))


def record(step, layer, rank, top, block="decoder", mtp_idx=None, extra=None, hs=None):
    """One record with Megatron's key order; hs: sidecar keys; extra: Strata's keys (after)."""
    r = {"step": step, "stage": "pre_dispatch", "block": block, "layer": layer, "rank": rank,
         "num_tokens": len(top), "topk": len(top[0]) if top else 0}
    if mtp_idx is not None:
        r["mtp_idx"] = mtp_idx
    r.update(hs or {})
    r["top_indices"] = [list(map(int, t)) for t in top]
    r.update(extra or {})
    return r


def write_trace(d, records, compact=False):
    """records grouped into router_trace_rank<R>.jsonl by their rank, in the order given."""
    os.makedirs(d, exist_ok=True)
    files = {}
    for r in records:
        if r["rank"] not in files:
            files[r["rank"]] = open(os.path.join(d, "router_trace_rank%d.jsonl" % r["rank"]), "w")
        seps = (",", ":") if compact else (", ", ": ")
        files[r["rank"]].write(json.dumps(r, separators=seps) + "\n")
    for f in files.values():
        f.close()


def run(script, *args, expect=0):
    p = subprocess.run(["/usr/bin/python3", os.path.join(SCRIPTS, script)] + list(args),
                       capture_output=True, text=True)
    if p.returncode != expect:
        raise AssertionError("%s %s exited %d\n%s\n%s" % (script, args, p.returncode, p.stdout, p.stderr))
    return p.stdout + p.stderr


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def close(a, b, tol=1e-9):
    assert abs(float(a) - float(b)) <= tol, "%r != %r" % (a, b)


def has_module(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False


def main(tests):
    """Run the test functions; print each name; exit 1 on the first failure."""
    for t in tests:
        t()
        print("ok  " + t.__name__)
