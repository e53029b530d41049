#!/usr/bin/python3
"""ctest plot_metrics: scripts/plot_metrics.py on the output of two tiny `strata train` runs.

    test_plot_metrics.py STRATA_BINARY SOURCE_DIR WORK_DIR

Checks that the PNGs are written and decode to a non-blank image, that the series parsed from
the TensorBoard event files equal the JSONL values (as float32, TensorBoard's simple_value) at the
same iterations, that the JSONL series equal the file's values exactly, that several runs and any
metric by name plot, that a restarted run's points replace the old ones, and that a metric that
was never logged is an error. Exits 77 (skipped) without matplotlib.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

CONFIG = """model:
  num_layers: 2
  hidden_size: 32
  num_attention_heads: 2
  seq_length: 32
  hidden_dropout: 0.0
  attention_dropout: 0.0
training:
  micro_batch_size: 2
  global_batch_size: 2
  train_iters: 6
  eval_interval: 3
  eval_iters: 1
  device: cpu
optimizer:
  lr: 1.0e-3
data:
  mock_data: true
logging:
  log_interval: 1
"""


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail("%s exited %d\n%s\n%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout


def check_png(path):
    import matplotlib.image
    with open(path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            fail(path + " is not a PNG")
    img = matplotlib.image.imread(path)
    if img.ndim != 3 or img.shape[0] < 200 or img.shape[1] < 200 or float(img.std()) == 0.0:
        fail("%s decodes to a blank or tiny image %s" % (path, img.shape))


def jsonl_values(path, metric):
    out = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if metric in rec:
                out.append([rec["iteration"], rec[metric]])
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    strata, src, work = sys.argv[1:4]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIP: matplotlib is not installed (scripts/setup.sh installs python3-matplotlib)")
        return 77
    plot = [sys.executable, os.path.join(src, "scripts", "plot_metrics.py")]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = os.path.join(work, "tiny.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    runs = {}
    for name, extra in (("runA", []), ("runB", ["--lr", "3e-3", "--seed", "7"])):
        d = os.path.join(work, name)
        run([strata, "train", "--config", cfg, "logging.tensorboard_dir=" + os.path.join(d, "tensorboard"),
             "logging.metrics_jsonl=" + os.path.join(d, "metrics.jsonl")] + extra)
        runs[name] = d
    a = runs["runA"]

    # One run, JSONL source: the default output and the parsed values.
    out = run(plot + [a, "--dump-json", os.path.join(work, "jsonl.json")]).strip()
    if out != os.path.join(a, "loss.png"):
        fail("printed path %r, expected %r" % (out, os.path.join(a, "loss.png")))
    check_png(out)
    parsed = json.load(open(os.path.join(work, "jsonl.json")))[a]
    for m in ("lm loss", "lm loss validation"):
        expected = jsonl_values(os.path.join(a, "metrics.jsonl"), m)
        if parsed[m] != expected or len(expected) != (6 if m == "lm loss" else 2):
            fail("%s from JSONL: %s, the file holds %s" % (m, parsed[m], expected))

    # The same run from its TensorBoard event files: the same iterations and float32 values.
    tb_png = os.path.join(work, "tb.png")
    run(plot + [a, "--source", "tensorboard", "--output", tb_png, "--dump-json", os.path.join(work, "tb.json")])
    check_png(tb_png)
    tb = json.load(open(os.path.join(work, "tb.json")))[a]
    for m in ("lm loss", "lm loss validation"):
        if [p[0] for p in tb[m]] != [p[0] for p in parsed[m]]:
            fail("%s iterations: TensorBoard %s, JSONL %s" % (m, tb[m], parsed[m]))
        for (it, v_tb), (_, v_js) in zip(tb[m], parsed[m]):
            if v_tb != f32(v_js):
                fail("%s at iteration %d: TensorBoard %r, JSONL %r (float32 %r)" % (m, it, v_tb, v_js, f32(v_js)))

    # Several runs, metrics by name.
    multi = os.path.join(work, "multi.png")
    run(plot + [a, runs["runB"], "--metric", "lm loss", "--metric", "learning-rate", "--output", multi])
    check_png(multi)

    # A run restarted in the same directory: its points replace the old ones from where it restarted.
    restarted = os.path.join(work, "restarted.jsonl")
    with open(restarted, "w") as f:
        for it, loss in ((1, 5.0), (2, 4.0), (3, 3.0), (2, 4.5), (3, 3.5)):
            f.write(json.dumps({"iteration": it, "lm loss": loss}) + "\n")
    run(plot + [restarted, "--metric", "lm loss", "--output", os.path.join(work, "r.png"),
                "--dump-json", os.path.join(work, "r.json")])
    got = json.load(open(os.path.join(work, "r.json")))[restarted]["lm loss"]
    if got != [[1, 5.0], [2, 4.5], [3, 3.5]]:
        fail("restarted run: %s" % got)

    # A metric that was never logged.
    p = subprocess.run(plot + [a, "--metric", "no such metric"], capture_output=True, text=True)
    if p.returncode != 1 or "none of no such metric logged" not in p.stderr:
        fail("unknown metric: rc %d, %s" % (p.returncode, p.stderr))
    print("plot_metrics: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
