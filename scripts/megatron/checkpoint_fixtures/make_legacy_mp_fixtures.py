"""Legacy (--ckpt-format torch) llama checkpoints saved under tensor or pipeline parallelism, by
Megatron-Core itself on 2 gloo ranks: tests/fixtures/megatron_ckpt/llama_mp/{torch_tp2,torch_pp2}.

The llama case of cases.py (same argv, batches) plus --tensor-model-parallel-size 2 or
--pipeline-model-parallel-size 2; two training steps, save, three more steps. Writes each
variant's save dir and a result JSON (argv, losses; torch_tp2 also the check-batch loss);
record.json of llama_mp was assembled from those (see its "note").

    .mcore-venv/bin/python scripts/megatron/checkpoint_fixtures/make_legacy_mp_fixtures.py OUT_DIR
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def worker(rank, mode, save, out):
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"})
    import cases
    import megatron_run as mr
    import megatron.training.arguments as arguments
    arguments.get_device_arch_version = lambda: 10  # validate_args asks the GPU under tp > 1

    iterations, check = cases.case_batches("llama")
    argv = cases.megatron_argv("llama", "torch", save)
    argv += ["--tensor-model-parallel-size", "2"] if mode == "tp2" else ["--pipeline-model-parallel-size", "2"]
    mr.init_megatron(argv)
    t = mr.Trainer()
    res = {"argv": argv, "before": [t.train_step(iterations[i]) for i in range(2)]}
    t.save()
    if mode == "tp2":
        res["loss_at_checkpoint"] = t.check_loss(check)
    res["continued"] = [t.train_step(iterations[i]) for i in range(2, len(iterations))]
    if rank == (0 if mode == "tp2" else 1):  # the last stage reports the losses
        Path(out).write_text(json.dumps(res, indent=1))


def main():
    if sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
        return
    out = Path(sys.argv[1])
    for mode in ("tp2", "pp2"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), CUDA_VISIBLE_DEVICES="",
                   OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
        save, result = out / f"torch_{mode}", out / f"result_{mode}.json"
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(r), mode, str(save), str(result)], env=env)
                 for r in range(2)]
        for p in procs:
            p.wait()
        print(mode, json.loads(result.read_text()))


if __name__ == "__main__":
    main()
