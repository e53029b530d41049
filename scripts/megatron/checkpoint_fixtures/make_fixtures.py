#!/usr/bin/env python3
"""Makes tests/fixtures/megatron_ckpt: Megatron-Core 0.19.2 checkpoints written by Megatron itself
on this CPU, with the losses a resumed run must reproduce; and loads a checkpoint into Megatron.

Fixture mode (default): for each case of cases.py (llama, gpt2, moe, mtp) and each of its variants
(torch_dist with/without the distributed optimizer, legacy torch with/without it) it runs, in a
fresh single-rank process (gloo, world size 1, CPU stand-ins of cpu_standins.py):
  megatron.training.arguments.parse_args/validate_args on the case's argv,
  megatron.training.initialize.initialize_megatron,
  megatron.training.training.setup_model_and_optimizer (get_model, get_megatron_optimizer,
  get_optimizer_param_scheduler), training.train_step for N=2 iterations on recorded token
  batches, training.save_checkpoint_and_time (-> checkpointing.save_checkpoint) at iteration 2,
  the eval-mode loss of the saved model on a fixed check batch, K=3 more train_steps (their
  losses recorded as Megatron reports them), then a fresh setup_model_and_optimizer with --load
  (checkpointing.load_checkpoint: model, optimizer, scheduler, RNG, iteration) that must
  reproduce the check loss and the K losses bit for bit.
It writes <out>/<case>/<variant>/ (Megatron's save dir as written) and <out>/<case>/record.json.

Load mode: make_fixtures.py --load-into-megatron SAVE_DIR --case CASE [--format torch_dist]
[--megatron-args "--no-load-rng"]
builds the case's model and optimizer, loads SAVE_DIR as --load would (full resume), and prints
as JSON the check-batch loss and the K continued losses on the recorded batches (compared with
the case's record.json when it is there).

Usage: .mcore-venv/bin/python scripts/megatron/checkpoint_fixtures/make_fixtures.py --out DIR
       [--cases llama,gpt2] [--variants torch_dist,torch]
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases  # noqa: E402


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _single_rank_env():
    env = dict(os.environ)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0",
                "WORLD_SIZE": "1", "LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "",
                "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"})
    return env


def _run_worker(worker_args, log_path):
    """Runs one Megatron run in its own process (Megatron's global state is per process)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"] + worker_args
    with open(log_path, "w") as log:
        rc = subprocess.call(cmd, env=_single_rank_env(), stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        tail = Path(log_path).read_text(errors="replace").splitlines()[-40:]
        raise RuntimeError(f"worker {worker_args} failed (rc {rc}); log {log_path}:\n" +
                           "\n".join(tail))


def _losses_equal(a, b):
    return a.keys() == b.keys() and all(a[k] == b[k] for k in a)


def worker_make(case, variant, save_dir, result_path):
    """One variant: train N, save, check loss, train K; then resume from the save and compare."""
    import megatron_run as mr
    import torch

    iterations, check = cases.case_batches(case)
    argv = cases.megatron_argv(case, variant, save_dir)
    args = mr.init_megatron(argv)
    trainer = mr.Trainer()
    before = [trainer.train_step(iterations[i]) for i in range(cases.TRAIN_STEPS_BEFORE_SAVE)]
    trainer.save()
    layout = mr.ddp_param_layout(trainer.model) if args.use_distributed_optimizer else None
    loss_at_checkpoint = trainer.check_loss(check)
    continued = [trainer.train_step(iterations[i]) for i in
                 range(cases.TRAIN_STEPS_BEFORE_SAVE, len(iterations))]
    del trainer

    # Resume: a fresh model and optimizer, loaded as `--load SAVE_DIR` would.
    args.load, args.save = str(save_dir), None
    torch.manual_seed(9999)  # the load must not depend on the init it overwrites
    resumed = mr.Trainer()
    assert resumed.iteration == cases.TRAIN_STEPS_BEFORE_SAVE, resumed.iteration
    resumed_check = resumed.check_loss(check)
    resumed_continued = [resumed.train_step(iterations[i]) for i in
                         range(cases.TRAIN_STEPS_BEFORE_SAVE, len(iterations))]
    bit_exact = resumed_check == loss_at_checkpoint and all(
        _losses_equal(a, b) for a, b in zip(continued, resumed_continued))
    result = {
        "variant": variant,
        "argv": argv,
        "padded_vocab_size": args.padded_vocab_size,
        "losses_before_save": before,
        "loss_at_checkpoint": loss_at_checkpoint,
        "continued_losses": continued,
        "resumed": {"loss_at_checkpoint": resumed_check, "continued_losses": resumed_continued},
        "resume_bit_exact": bit_exact,
        "debug_param_layout": layout,
    }
    Path(result_path).write_text(json.dumps(result, indent=1))


def worker_load(case, load_dir, ckpt_format, dist_opt, result_path, extra_argv=()):
    """Load mode: load load_dir into the case's Megatron model/optimizer, report the losses.
    extra_argv: more Megatron flags (e.g. --no-load-rng for a checkpoint without RNG state)."""
    import megatron_run as mr

    iterations, check = cases.case_batches(case)
    variant = [v for v, (f, d) in cases.VARIANTS.items() if f == ckpt_format and d == dist_opt][0]
    argv = cases.megatron_argv(case, variant, None, load_dir=load_dir) + list(extra_argv)
    mr.init_megatron(argv)
    trainer = mr.Trainer()
    loaded_iteration = trainer.iteration
    result = {
        "load_dir": str(load_dir),
        "argv": argv,
        "iteration_loaded": loaded_iteration,
        "loss_at_checkpoint": trainer.check_loss(check),
        "continued": [],
    }
    for i in range(loaded_iteration, min(loaded_iteration + cases.CONTINUED_STEPS,
                                         len(iterations))):
        losses = trainer.train_step(iterations[i])
        result["continued"].append({"iteration": i + 1, "losses": losses})
    Path(result_path).write_text(json.dumps(result, indent=1))


def _versions():
    import importlib.metadata as md

    return {"megatron_core": md.version("megatron-core"), "torch": md.version("torch"),
            "numpy": md.version("numpy"), "python": sys.version.split()[0]}


def make_case(case, variants, out_dir, log_dir):
    iterations, check = cases.case_batches(case)
    results = {}
    for variant in variants:
        save_dir = out_dir / case / variant
        shutil.rmtree(save_dir, ignore_errors=True)
        result_path = log_dir / f"{case}_{variant}.json"
        print(f"[make_fixtures] {case}/{variant} ...", flush=True)
        _run_worker(["make", case, variant, str(save_dir), str(result_path)],
                    log_dir / f"{case}_{variant}.log")
        results[variant] = json.loads(result_path.read_text())
        print(f"[make_fixtures] {case}/{variant}: loss_at_checkpoint "
              f"{results[variant]['loss_at_checkpoint']}, resume_bit_exact "
              f"{results[variant]['resume_bit_exact']}", flush=True)
    write_record(case, iterations, check, results, out_dir)


def write_record(case, iterations, check, results, out_dir):
    first = next(iter(results.values()))
    n = cases.TRAIN_STEPS_BEFORE_SAVE
    at_ckpt = {v: r["loss_at_checkpoint"] for v, r in results.items()}
    record = {
        "case": case,
        "versions": _versions(),
        "megatron_argv": {v: r["argv"] for v, r in results.items()},
        "argv_note": "--save points at the directory the fixture was written to; the variants "
                     "differ only in --ckpt-format and --use-distributed-optimizer",
        "padded_vocab_size": first["padded_vocab_size"],
        "iteration_saved": n,
        "data_note": "each iteration is 2 micro-batches of [micro_batch_size=2, seq=16] "
                     "(global batch 4); labels are tokens shifted by one; loss = "
                     "sum(per-token loss * loss_mask) / sum(loss_mask) over the global batch "
                     "(Megatron's 'lm loss' report)",
        "check_batch": cases.batch_to_lists(check),
        "loss_at_checkpoint": (next(iter(at_ckpt.values())) if len(set(at_ckpt.values())) == 1
                               else at_ckpt),
        "loss_at_checkpoint_per_variant": at_ckpt,
        "trained_before_save": [
            {"iteration": i + 1,
             "micro_batches": [cases.batch_to_lists(b) for b in iterations[i]],
             "losses_per_variant": {v: r["losses_before_save"][i] for v, r in results.items()}}
            for i in range(n)],
        "continued": [],
        "resume_bit_exact": {v: r["resume_bit_exact"] for v, r in results.items()},
        "debug_param_layout": {v: r["debug_param_layout"] for v, r in results.items()
                               if r["debug_param_layout"] is not None},
    }
    for k in range(cases.CONTINUED_STEPS):
        per_variant = {v: r["continued_losses"][k] for v, r in results.items()}
        distinct = {json.dumps(x, sort_keys=True) for x in per_variant.values()}
        record["continued"].append({
            "iteration": n + k + 1,
            "micro_batches": [cases.batch_to_lists(b) for b in iterations[n + k]],
            "losses": (next(iter(per_variant.values())) if len(distinct) == 1 else per_variant),
            "losses_per_variant": per_variant,
        })
    path = out_dir / case / "record.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"[make_fixtures] wrote {path}", flush=True)


def _detect_format(load_dir):
    load_dir = Path(load_dir)
    it = (load_dir / "latest_checkpointed_iteration.txt").read_text().strip()
    iter_dir = load_dir / ("release" if it == "release" else f"iter_{int(it):07d}")
    if (iter_dir / "metadata.json").exists():
        meta = (iter_dir / ".metadata").read_bytes()
        return "torch_dist", b"optimizer.distributed" in meta
    return "torch", any(iter_dir.glob("*/distrib_optim.pt"))


def load_mode(opts):
    ckpt_format, dist_opt = _detect_format(opts.load_into_megatron)
    if opts.format:
        ckpt_format = opts.format
    if opts.distributed_optimizer != "auto":
        dist_opt = opts.distributed_optimizer == "yes"
    log_dir = Path(tempfile.mkdtemp(prefix="mcore_load_"))
    result_path = log_dir / "result.json"
    _run_worker(["load", opts.case, str(Path(opts.load_into_megatron).resolve()), ckpt_format,
                 "1" if dist_opt else "0", str(result_path), json.dumps(opts.megatron_args.split())],
                log_dir / "load.log")
    result = json.loads(result_path.read_text())
    result["format"], result["distributed_optimizer"] = ckpt_format, dist_opt
    record_path = Path(opts.record or (HERE.parents[2] / "tests/fixtures/megatron_ckpt" /
                                       opts.case / "record.json"))
    if record_path.exists():
        record = json.loads(record_path.read_text())
        variant = [v for v, (f, d) in cases.VARIANTS.items()
                   if f == ckpt_format and d == dist_opt][0]
        expected_at_ckpt = record["loss_at_checkpoint_per_variant"].get(
            variant, record["loss_at_checkpoint"])
        result["matches_record"] = {
            "compared_with_variant": variant,
            "loss_at_checkpoint": result["loss_at_checkpoint"] == expected_at_ckpt,
            "continued": [c["losses"] == r["losses_per_variant"].get(variant, r["losses"])
                          for c, r in zip(result["continued"], record["continued"])],
        }
        result["record"] = str(record_path)
    print(json.dumps(result, indent=1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(HERE.parents[2] / "tests/fixtures/megatron_ckpt"))
    p.add_argument("--cases", default=",".join(cases.CASES))
    p.add_argument("--variants", default=None, help="comma list; default: each case's own")
    p.add_argument("--logs", default=None, help="where worker logs go (default: a temp dir)")
    p.add_argument("--load-into-megatron", default=None, metavar="SAVE_DIR")
    p.add_argument("--case", default="llama")
    p.add_argument("--format", choices=["torch_dist", "torch"], default=None)
    p.add_argument("--distributed-optimizer", choices=["auto", "yes", "no"], default="auto")
    p.add_argument("--record", default=None, help="record.json to compare with (load mode)")
    p.add_argument("--megatron-args", default="",
                   help="more Megatron flags for load mode, e.g. --no-load-rng (a legacy checkpoint without RNG "
                        "state, as Strata writes it)")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    opts = p.parse_args()

    if opts.worker:
        kind, rest = opts.worker[0], opts.worker[1:]
        if kind == "make":
            worker_make(*rest)
        else:
            case, load_dir, fmt, dist_opt, result_path = rest[:5]
            extra = json.loads(rest[5]) if len(rest) > 5 else []
            worker_load(case, load_dir, fmt, dist_opt == "1", result_path, extra)
        return
    if opts.load_into_megatron:
        load_mode(opts)
        return
    out_dir = Path(opts.out).resolve()
    log_dir = Path(opts.logs or tempfile.mkdtemp(prefix="mcore_fixtures_"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"[make_fixtures] worker logs in {log_dir}", flush=True)
    for case in opts.cases.split(","):
        variants = opts.variants.split(",") if opts.variants else cases.CASE_VARIANTS[case]
        make_case(case, variants, out_dir, log_dir)


if __name__ == "__main__":
    main()
