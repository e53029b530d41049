#!/usr/bin/env python3
"""PyTorch eager reference for `strata bench train --reference torch`: the same GPT-2-style model
(pre-norm LayerNorm, learned absolute positions, causal multi-head attention, GeLU or SwiGLU MLP or
a mixture-of-experts layer (scripts/bench/moe_torch.py, --moe-*), tied output layer, biases), the
same init (N(0, init_std); attention and MLP output projections
N(0, init_std / sqrt(2 * num_layers)); LayerNorm 1/0; biases 0), the same loss (mean token
cross-entropy over the padded vocabulary, as Megatron computes it) and the same AdamW
(betas, eps, weight decay on >= 2-d parameters only, global-norm clipping), in fp32 eager mode
on the CPU or, with --device cuda, on the GPU (TF32 off, so both sides do fp32 GEMMs). Times `--iters` training steps after `--warmup` and prints one JSON object:
median and p90 step time, tokens/s, peak RSS (and peak CUDA allocation), every step's LM loss and
ln(vocab). With --init-from FILE (what `strata bench train` passes) it starts from Strata's
initial parameters and trains on Strata's batch of each step (scripts/bench/strata_init.py), so
the losses of the first steps equal Strata's up to f32 rounding; the router losses are added to
the objective, the LM loss (masked token mean) is what it reports.

Run by `strata bench train` with the model/batch/thread settings of its config; also usable alone:
  OMP_NUM_THREADS=2 python3 scripts/bench/gpt_train_torch.py --layers 4 --hidden 256 --heads 4 \\
      --vocab 50304 --seq 64 --batch 4 --iters 10 --warmup 2 --threads 2
Needs Debian's python3-torch (`scripts/setup.sh --bench`)."""
import argparse
import json
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import moe_torch
import strata_init


class Block(nn.Module):
    def __init__(self, h, heads, mlp, eps, bias):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h, eps=eps)
        self.qkv = nn.Linear(h, 3 * h, bias=bias)
        self.proj = nn.Linear(h, h, bias=bias)
        self.ln2 = nn.LayerNorm(h, eps=eps)
        self.mlp = mlp

    def attention(self, x):
        b, s, h = x.shape
        hd = h // self.heads
        q, k, v = self.qkv(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, hd).transpose(1, 2) for t in (q, k, v))  # [b, nh, s, hd]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, h)
        return self.proj(y)

    def forward(self, x):  # -> (x, router losses)
        x = x + self.attention(self.ln1(x))
        y, aux = self.mlp(self.ln2(x))
        return x + y, aux


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.hidden)
        self.wpe = nn.Embedding(a.max_positions or a.seq, a.hidden)
        ffn = a.ffn or 4 * a.hidden
        moe = [c == "1" for c in a.moe_layers.split(",")] if a.moe_layers else [True] * a.layers
        self.blocks = nn.ModuleList(
            Block(a.hidden, a.heads, moe_torch.MoE(a.hidden, a) if a.moe_experts and moe[i]
                  else moe_torch.MLP(a.hidden, ffn, a), a.eps, not a.no_bias_linear) for i in range(a.layers))
        self.ln_f = nn.LayerNorm(a.hidden, eps=a.eps)
        out_std = a.init_std / math.sqrt(2.0 * a.layers)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p) if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight" \
                    else nn.init.zeros_(p)
            elif name.endswith("proj.weight") or name.endswith("fc2.weight"):
                nn.init.normal_(p, 0.0, out_std)
            else:
                nn.init.normal_(p, 0.0, a.init_std)
        for blk in self.blocks:
            if isinstance(blk.mlp, moe_torch.MoE):
                blk.mlp.init_weights(a.init_std, out_std)

    def forward(self, tokens, labels, mask):  # -> (LM loss, objective)
        b, s = tokens.shape
        x = self.wte(tokens) + self.wpe(torch.arange(s, device=tokens.device))
        aux = x.new_zeros(())
        for blk in self.blocks:
            x, a = blk(x)
            aux = aux + a
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output layer
        ce = F.cross_entropy(logits.view(b * s, -1), labels.reshape(b * s), reduction="none")
        lm = (ce * mask.reshape(b * s)).sum() / mask.sum()
        return lm, lm + aux


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=0, help="0: 4 * hidden")
    p.add_argument("--vocab", type=int, default=50304, help="the padded vocabulary (logit columns)")
    p.add_argument("--real-vocab", type=int, default=0, help="token ids are drawn below this (0: --vocab)")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--max-positions", type=int, default=0)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--tanh-gelu", action="store_true")
    p.add_argument("--no-bias-linear", action="store_true", help="linear layers without biases (MoE models)")
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--adam-eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip-grad", type=float, default=1.0)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="0: torch's default")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--init-from", default="", help="Strata's initial parameters and batches (safetensors)")
    moe_torch.add_args(p)
    a = p.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT(a).to(dev)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.adam_eps)
    if a.init_from:
        tokens, labels, masks = (t.to(dev) for t in strata_init.load(a.init_from, model, a.heads))
    else:
        g = torch.Generator().manual_seed(a.seed)
        data = torch.randint(0, a.real_vocab or a.vocab, (a.batch, a.seq + 1), generator=g)
        tokens, labels = data[:, :-1].unsqueeze(0).to(dev), data[:, 1:].unsqueeze(0).to(dev)
        masks = torch.ones(1, a.batch, a.seq, device=dev)
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)

    losses, times = [], []
    for it in range(a.warmup + a.iters):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        step = it % tokens.shape[0]
        loss, objective = model(tokens[step], labels[step], masks[step])
        objective.backward()
        if a.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_grad)
        opt.step()
        lv = loss.item()  # a device synchronisation on cuda, as Strata's step reads its loss
        dt = time.perf_counter() - t0
        losses.append(lv)
        if it >= a.warmup:
            times.append(dt * 1000.0)
    times.sort()
    median = times[len(times) // 2]
    p90 = times[min(len(times) - 1, int(math.ceil(0.9 * len(times))) - 1)]
    n_params = sum(q.numel() for q in model.parameters())
    ok = all(math.isfinite(x) for x in losses)
    print(json.dumps({
        "impl": "torch", "torch_version": torch.__version__, "threads": torch.get_num_threads(),
        "params": n_params, "tokens_per_step": a.batch * a.seq, "iters": a.iters, "warmup": a.warmup,
        "median_ms": median, "p90_ms": p90, "tokens_per_second": a.batch * a.seq * 1000.0 / median,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "device": str(dev), "peak_allocated_bytes": torch.cuda.max_memory_allocated(dev) if cuda else 0,
        "initial_loss": losses[0], "final_loss": losses[-1], "losses": losses, "ln_vocab": math.log(a.vocab), "finite": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
