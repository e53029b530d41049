#!/usr/bin/env python3
"""ctest memory_snapshot: `strata train --record-memory-history` writes the snapshot Megatron users
open with PyTorch's memory tools (core/memory_history.h).

Reads the pickle with the standard library's pickle, as torch.cuda._memory_viz does, and checks it
against PyTorch's snapshot layout and against itself: the per-rank file name Megatron uses
(<base>_<rank><ext>), one snapshot per log interval and the first iteration, "segments" and
"device_traces" with PyTorch's keys, every free of a block allocated before, the live blocks equal
to the allocations the trace has not freed (addresses and sizes), the parameters' allocations
among them (made before the first step, since recording starts before the model is built), and
frames naming Strata's phase scopes. With torch >= 2.1 (not Debian's 1.13), also runs
torch.cuda._memory_viz.trace and segsum on it; otherwise that part is skipped, not failed.

    test_memory_snapshot.py STRATA WORKDIR [DEVICE]   (DEVICE: cpu, the default, or cuda on a GPU machine)
"""
import os
import pickle
import re
import shutil
import subprocess
import sys

CONFIG = """model:
  num_layers: 2
  hidden_size: 32
  num_attention_heads: 2
  seq_length: 32
training:
  micro_batch_size: 2
  global_batch_size: 2
  train_iters: 4
  eval_interval: 1000
  eval_iters: 1
  device: DEVICE
optimizer:
  lr: 1.0e-3
data:
  mock_data: true
logging:
  log_interval: 2
"""


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def main():
    strata, work = sys.argv[1:3]
    device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = os.path.join(work, "tiny.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.replace("DEVICE", device))
    snap = os.path.join(work, "mem", "snapshot.pickle")
    os.makedirs(os.path.dirname(snap))
    # Megatron's flags, as a Megatron script passes them.
    cmd = [strata, "train", "--config", cfg, "--record-memory-history", "--memory-snapshot-path", snap]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail("%s exited %d\n%s\n%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    path = os.path.join(work, "mem", "snapshot_0.pickle")
    check(os.path.exists(path), "no %s (files: %s)" % (path, os.listdir(os.path.dirname(snap))))
    log = p.stdout + p.stderr
    check(log.count("memory history: wrote " + path) == 3, "expected 3 snapshots (iterations 1, 2, 4):\n" + log[-3000:])
    with open(path, "rb") as f:
        data = pickle.load(f)

    check(set(data) >= {"segments", "device_traces"}, "keys %s" % sorted(data))
    check(len(data["device_traces"]) == 1, "one device trace (the CPU or cuda:0)")
    trace = data["device_traces"][0]
    check(len(trace) > 100, "only %d trace entries" % len(trace))
    for e in trace:
        check(set(e) >= {"action", "addr", "size", "stream", "time_us", "frames"}, "trace entry keys %s" % sorted(e))
        check(e["action"] in ("alloc", "free_requested", "free_completed"), "action %r" % e["action"])
    times = [e["time_us"] for e in trace]
    check(times == sorted(times), "trace entries out of time order")

    # Replay the trace: frees match earlier allocations; what stays allocated is the segments.
    live = {}
    for e in trace:
        if e["action"] == "alloc":
            check(e["addr"] not in live, "address %#x allocated twice" % e["addr"])
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            check(live.pop(e["addr"], None) == e["size"], "free of %#x (%d bytes) without its allocation" % (e["addr"], e["size"]))
    segs = {s["address"]: s for s in data["segments"]}
    check(segs.keys() == live.keys(), "segments %d vs live allocations in the trace %d" % (len(segs), len(live)))
    for addr, s in segs.items():
        check(s["total_size"] == live[addr] == sum(b["size"] for b in s["blocks"]), "segment %#x sizes" % addr)
        check(all(b["state"] == "active_allocated" for b in s["blocks"]), "block states")
        check(s["requested_size"] <= s["total_size"], "requested above allocated")
    # The parameters, their gradients and AdamW's two moments stay allocated (f32: 16 bytes per
    # parameter, the count from the run's own log line), allocated before the first step.
    m = re.search(r"model: (\d+) parameters", log)
    check(m is not None, "no 'model: N parameters' line")
    live_bytes = sum(live.values())
    check(live_bytes >= 16 * int(m.group(1)), "%d live bytes for %s parameters" % (live_bytes, m.group(1)))
    named = [f["name"] for e in trace for f in e["frames"]]
    check("iteration" in named, "no frame names the training iteration scope: %s" % sorted(set(named))[:20])

    try:
        import torch
        from torch.cuda import _memory_viz
        if not hasattr(_memory_viz, "segsum"):
            raise ImportError("torch %s has no _memory_viz.segsum" % torch.__version__)
    except ImportError as err:
        print("torch.cuda._memory_viz part skipped: %s" % err)
    else:
        text = _memory_viz.trace(data)
        check("entries" in text, "memory_viz.trace: " + text[:200])
        summary = _memory_viz.segsum(data)
        check("Summary of segments" in summary, "memory_viz.segsum: " + summary[:200])
        print("torch %s memory_viz read it: %s" % (torch.__version__, text.splitlines()[0]))
    print("ok: %d trace entries, %d live blocks, %d live bytes" % (len(trace), len(segs), live_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
