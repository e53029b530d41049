#!/usr/bin/env python3
"""Times the working tree's `strata` against a base commit's on the standard CPU shapes.

    scripts/bench/compare_commits.py BASE [--rounds 3] [--threads N] [--shapes gpt_l4_d256,gpt_124m,moe,mamba]

Builds `strata` (CUDA off, RelWithDebInfo, the same flags on both sides) for BASE in a detached
worktree under build_compare/ and for the working tree as it is (uncommitted changes included),
then runs every shape on both binaries alternately (base first in odd rounds, tree first in even
ones), with the working tree's configs for both. Prints each run's median step time and, per
shape, the median over rounds and the ratio tree / base (below 1: the tree is faster), and the
best run of each side with their ratio (interference from other work only adds time, so on a noisy
machine the best runs are the steadier comparison).

docs/performance.md asks for this before a change to kernels, threading or the training loop is
called done. Standard library only; run it on a quiet machine (noise here is about +-10 %).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT_124M = ["model.num_layers=12", "model.hidden_size=768", "model.num_attention_heads=12"]

# name -> (strata arguments after `bench`, the JSON field holding one run's time in ms)
SHAPES = {
    "gpt_l4_d256": (["train", "--config", "configs/bench_gpt_cpu.yaml", "--iters", "10", "--warmup", "2"],
                    "median_ms"),
    "gpt_124m": (["train", "--config", "configs/bench_gpt_cpu.yaml", "--iters", "4", "--warmup", "1"] + GPT_124M,
                 "median_ms"),
    "moe": (["train", "--config", "configs/bench_moe.yaml", "--iters", "6", "--warmup", "2"], "median_ms"),
    "mamba": (["mamba", "--iters", "5", "--warmup", "1"], "fwd_bwd_ms"),
}


def run(cmd, **kw):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, **kw)


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True, text=True).stdout.strip()


def build(src, build_dir):
    """Configures and builds the `strata` target of the source tree `src`; returns the binary."""
    run(["cmake", "-S", src, "-B", build_dir, "-G", "Ninja", "-DSTRATA_CUDA=OFF",
         "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], stdout=subprocess.DEVNULL)
    run(["cmake", "--build", build_dir, "--target", "strata", "-j", str(os.cpu_count() or 2)],
        stdout=subprocess.DEVNULL)
    return os.path.join(build_dir, "strata")


def build_base(sha, out_root):
    """The base commit's binary, built once per commit and kept under build_compare/."""
    binary = os.path.join(out_root, "base-" + sha[:12], "build", "strata")
    if os.path.exists(binary):
        return binary
    src = os.path.join(out_root, "base-" + sha[:12], "src")
    if not os.path.isdir(src):
        run(["git", "-C", ROOT, "worktree", "add", "--detach", src, sha], stdout=subprocess.DEVNULL)
    try:
        return build(src, os.path.dirname(binary))
    finally:
        run(["git", "-C", ROOT, "worktree", "remove", "--force", src], stdout=subprocess.DEVNULL)


def time_once(binary, shape, threads):
    """One run of `shape` on `binary`: the run's time in ms, or None when the binary refuses it."""
    args, field = SHAPES[shape]
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        cmd = [binary, "bench", *args[:1], "--json", f.name, *args[1:]]
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"  {shape}: {binary} failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return None
        result = json.load(f)
    first = result["runs"][0]["strata"]
    return float(first[field])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="the commit to compare against (any git revision)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, from " + ", ".join(SHAPES))
    ap.add_argument("--tree-binary", help="use this binary for the working tree instead of building it")
    ap.add_argument("--out", default=os.path.join(ROOT, "build_compare"), help="where the builds go")
    opts = ap.parse_args()
    shapes = [s for s in opts.shapes.split(",") if s]
    for s in shapes:
        if s not in SHAPES:
            sys.exit(f"compare_commits: unknown shape '{s}' (known: {', '.join(SHAPES)})")

    sha = git("rev-parse", "--verify", opts.base + "^{commit}")
    head = git("rev-parse", "--short=12", "HEAD")
    dirty = " + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    os.makedirs(opts.out, exist_ok=True)
    binaries = {"base": build_base(sha, opts.out),
                "tree": opts.tree_binary or build(ROOT, os.path.join(opts.out, "tree"))}

    times = {s: {"base": [], "tree": []} for s in shapes}
    for r in range(opts.rounds):
        order = ["base", "tree"] if r % 2 == 0 else ["tree", "base"]
        for s in shapes:
            for side in order:
                t = time_once(binaries[side], s, opts.threads)
                times[s][side].append(t)
                print(f"round {r + 1} {s:12s} {side:4s} {t if t is None else round(t, 1)} ms", flush=True)

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"\nbase {sha[:12]} vs tree {head}{dirty}; {opts.threads} threads, {opts.rounds} rounds; {cpu}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(f"{'shape':14s} {'base ms (median)':>18s} {'tree ms (median)':>18s} {'tree / base':>12s} "
          f"{'best base / tree':>18s} {'best ratio':>11s}   per round")
    for s in shapes:
        b = [t for t in times[s]["base"] if t is not None]
        t = [t for t in times[s]["tree"] if t is not None]
        if not b or not t:
            print(f"{s:14s} {'failed' if not b else round(statistics.median(b), 1):>18} "
                  f"{'failed' if not t else round(statistics.median(t), 1):>18}")
            continue
        per_round = " ".join(f"{y / x:.3f}" for x, y in zip(times[s]["base"], times[s]["tree"]) if x and y)
        mb, mt = statistics.median(b), statistics.median(t)
        best = f"{min(b):.1f} / {min(t):.1f}"
        print(f"{s:14s} {mb:18.1f} {mt:18.1f} {mt / mb:12.3f} {best:>18s} {min(t) / min(b):11.3f}   {per_round}")


if __name__ == "__main__":
    main()
