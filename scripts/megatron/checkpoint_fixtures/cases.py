"""The fixture cases: Megatron argv per case and variant, and the token batches they train on.

Each case is a tiny GPTModel configuration expressed as the command line pretrain_gpt.py would get
(megatron/training/arguments.py parses it); each variant adds the checkpoint format and whether
the distributed optimizer is used. The batches are drawn from a fixed numpy seed per case and
recorded in record.json, so that any other implementation can replay the exact same steps.
"""

import numpy as np

TRAIN_STEPS_BEFORE_SAVE = 2  # N: iterations trained from Megatron's init, then saved
CONTINUED_STEPS = 3  # K: iterations trained after the save (recorded, and replayed on resume)
SEQ_LENGTH = 16
MICRO_BATCH_SIZE = 2
GLOBAL_BATCH_SIZE = 4  # 2 micro-batches per step on one rank: gradient accumulation
NUM_MICRO_BATCHES = GLOBAL_BATCH_SIZE // MICRO_BATCH_SIZE
VOCAB_SIZE = 100  # NullTokenizer adds the eod id (101 ids), padded by Megatron to 128
TOKEN_ID_LIMIT = 100  # data token ids are drawn from [0, 100)

# Common to every case: a 2-layer, 4-head fp32 model trained with Adam (weight decay 0.1, clip
# 1.0), a 2-iteration linear warmup then cosine decay, everything Megatron would fuse run unfused,
# no dropout, the local (non-Transformer-Engine) layer spec, CPU initialization, gloo.
COMMON_ARGV = [
    "--num-layers", "2",
    "--num-attention-heads", "4",
    "--seq-length", str(SEQ_LENGTH),
    "--max-position-embeddings", str(SEQ_LENGTH),
    "--micro-batch-size", str(MICRO_BATCH_SIZE),
    "--global-batch-size", str(GLOBAL_BATCH_SIZE),
    "--tokenizer-type", "NullTokenizer",
    "--vocab-size", str(VOCAB_SIZE),
    "--make-vocab-size-divisible-by", "128",
    "--init-method-std", "0.02",
    "--attention-dropout", "0.0",
    "--hidden-dropout", "0.0",
    "--optimizer", "adam",
    "--lr", "1e-2",
    "--min-lr", "1e-3",
    "--lr-decay-style", "cosine",
    "--lr-warmup-iters", "2",
    "--lr-decay-iters", "10",
    "--train-iters", "10",
    "--weight-decay", "0.1",
    "--adam-beta1", "0.9",
    "--adam-beta2", "0.95",
    "--adam-eps", "1e-8",
    "--clip-grad", "1.0",
    "--seed", "1234",
    "--transformer-impl", "local",
    "--use-cpu-initialization",
    "--no-bias-gelu-fusion",
    "--no-bias-swiglu-fusion",
    "--no-bias-dropout-fusion",
    "--no-masked-softmax-fusion",
    "--no-gradient-accumulation-fusion",
    "--no-rope-fusion",
    "--no-persist-layer-norm",
    "--distributed-backend", "gloo",
    "--save-interval", str(TRAIN_STEPS_BEFORE_SAVE),
    "--log-interval", "1",
    "--eval-iters", "0",
]

LLAMA_ARGV = [
    "--hidden-size", "32",
    "--ffn-hidden-size", "64",
    "--normalization", "RMSNorm",
    "--swiglu",
    "--position-embedding-type", "rope",
    "--rotary-base", "10000",
    "--group-query-attention",
    "--num-query-groups", "2",
    "--untie-embeddings-and-output-weights",
    "--disable-bias-linear",
]

GPT2_ARGV = [
    "--hidden-size", "32",
    "--ffn-hidden-size", "128",
    "--normalization", "LayerNorm",
    "--position-embedding-type", "learned_absolute",
    "--add-qkv-bias",
]

MOE_ARGV = LLAMA_ARGV[:2] + [
    "--ffn-hidden-size", "64",
    "--normalization", "RMSNorm",
    "--swiglu",
    "--position-embedding-type", "rope",
    "--group-query-attention",
    "--num-query-groups", "2",
    "--untie-embeddings-and-output-weights",
    "--disable-bias-linear",
    "--num-experts", "4",
    "--moe-router-topk", "2",
    "--moe-ffn-hidden-size", "32",
    "--moe-router-load-balancing-type", "aux_loss",
    "--moe-aux-loss-coeff", "0.01",
    "--moe-token-dispatcher-type", "alltoall",
]

MTP_ARGV = LLAMA_ARGV + ["--mtp-num-layers", "1", "--mtp-loss-scaling-factor", "0.1"]

CASES = {
    "llama": {"argv": LLAMA_ARGV, "seed": 101},
    "gpt2": {"argv": GPT2_ARGV, "seed": 202},
    "moe": {"argv": MOE_ARGV, "seed": 303},
    "mtp": {"argv": MTP_ARGV, "seed": 404},
}

# variant name -> (ckpt format, use the distributed optimizer)
VARIANTS = {
    "torch_dist_distopt": ("torch_dist", True),
    "torch_dist": ("torch_dist", False),
    "torch": ("torch", False),
    "torch_distopt": ("torch", True),
}

CASE_VARIANTS = {
    "llama": ["torch_dist_distopt", "torch_dist", "torch", "torch_distopt"],
    "gpt2": ["torch_dist_distopt", "torch"],
    "moe": ["torch_dist_distopt", "torch"],
    "mtp": ["torch_dist_distopt", "torch"],
}


def megatron_argv(case, variant, save_dir, load_dir=None):
    ckpt_format, dist_opt = VARIANTS[variant]
    argv = list(COMMON_ARGV) + list(CASES[case]["argv"])
    argv += ["--ckpt-format", ckpt_format]
    if dist_opt:
        argv += ["--use-distributed-optimizer"]
    if save_dir is not None:
        argv += ["--save", str(save_dir)]
    if load_dir is not None:
        argv += ["--load", str(load_dir)]
    return argv


def _micro_batch(rng):
    """One micro-batch [MICRO_BATCH_SIZE, SEQ_LENGTH]: labels are the tokens shifted by one,
    a few loss-mask zeros so that masking matters, positions 0..S-1."""
    seq = rng.integers(0, TOKEN_ID_LIMIT, size=(MICRO_BATCH_SIZE, SEQ_LENGTH + 1))
    loss_mask = np.ones((MICRO_BATCH_SIZE, SEQ_LENGTH), dtype=np.int64)
    for row in range(MICRO_BATCH_SIZE):
        zeros = rng.choice(SEQ_LENGTH, size=2, replace=False)
        loss_mask[row, zeros] = 0
    position_ids = np.tile(np.arange(SEQ_LENGTH), (MICRO_BATCH_SIZE, 1))
    return {
        "tokens": seq[:, :-1].astype(np.int64),
        "labels": seq[:, 1:].astype(np.int64),
        "loss_mask": loss_mask,
        "position_ids": position_ids.astype(np.int64),
    }


def case_batches(case):
    """(batches per iteration 1..N+K, each a list of NUM_MICRO_BATCHES micro-batches; the check
    batch). Same numpy seed every run."""
    rng = np.random.default_rng(CASES[case]["seed"])
    steps = TRAIN_STEPS_BEFORE_SAVE + CONTINUED_STEPS
    iterations = [[_micro_batch(rng) for _ in range(NUM_MICRO_BATCHES)] for _ in range(steps)]
    check = _micro_batch(rng)
    return iterations, check


def batch_to_lists(batch):
    return {k: v.tolist() for k, v in batch.items()}
