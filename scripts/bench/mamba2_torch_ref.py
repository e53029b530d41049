"""PyTorch eager reference of the Mamba2 mixer for `strata bench mamba` (apps/strata/bench_mamba.h):
the same computation as models/layers/mamba_mixer.cpp — RMSNorm pre-norm, in_proj (z | x | B | C |
dt), causal depthwise conv1d + SiLU, dt = softplus(dt + dt_bias), A = -exp(A_log), the chunked SSD
scan in the ssd_minimal form of Mamba-2 (Dao & Gu 2024, "ssd_minimal_discrete": intra-chunk
quadratic term, chunk states, inter-chunk recurrence, state-to-output term) plus D skip, the gated
grouped RMSNorm (y * silu(z), RMSNorm per group, weight) and out_proj — with autograd backward.

It loads Strata's parameters, input x, output gradient dy and Strata's results (y, dx, every
parameter gradient) from the safetensors file the bench writes (--init), checks its own results
against them (max |a - b| / max |b| per tensor), then times warmup + iters forward + backward
passes at --threads threads and prints one JSON line. Exits 77 when torch is not installed."""
import argparse
import json
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("mamba2_torch_ref.py: torch is not installed for", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_init import read_safetensors  # noqa: E402

PREFIX = "decoder.layers.0.mixer."
NAMES = ["in_proj.layer_norm_weight", "in_proj.weight", "conv1d.weight", "conv1d.bias", "dt_bias", "A_log", "D",
         "norm.weight", "out_proj.weight"]


def segsum(x):
    """[..., T] -> [..., T, T]: out[i, j] = sum(x[j+1..i]) for j <= i, -inf above the diagonal."""
    T = x.size(-1)
    x = x[..., None].expand(*x.shape, T)
    x = x.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1), 0)
    s = torch.cumsum(x, dim=-2)
    return s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=0), -torch.inf)


def ssd_minimal(X, A, B, C, Q):
    """X [b, l, h, p] (x*dt), A [b, l, h] (A*dt), B, C [b, l, h, n]; l a multiple of Q -> Y [b, l, h, p]."""
    b, l, h, p = X.shape
    c = l // Q
    X, B, C = (t.reshape(b, c, Q, *t.shape[2:]) for t in (X, B, C))
    A = A.reshape(b, c, Q, h).permute(0, 3, 1, 2)  # b h c l
    A_cumsum = torch.cumsum(A, dim=-1)
    L = torch.exp(segsum(A))  # 1. diagonal blocks
    Y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", C, B, L, X)
    decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)  # 2. chunk states
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, decay_states, X)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)  # 3. inter-chunk recurrence
    decay_chunk = torch.exp(segsum(F.pad(A_cumsum[:, :, :, -1], (1, 0))))
    states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
    Y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, states, torch.exp(A_cumsum))  # 4. state -> output
    return (Y_diag + Y_off).reshape(b, l, h, p)


def mixer(P, x, heads, groups, chunk, eps):
    """x [s, b, hidden] -> [s, b, hidden]."""
    h = x.transpose(0, 1)
    b, s, _ = h.shape
    d_inner = P["norm.weight"].numel()
    conv_dim = P["conv1d.bias"].numel()
    gn = (conv_dim - d_inner) // 2
    hn = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * P["in_proj.layer_norm_weight"]
    zx = hn @ P["in_proj.weight"].t()
    z, xbc, dt = torch.split(zx, [d_inner, conv_dim, heads], dim=-1)
    w = P["conv1d.weight"]
    xbc = F.silu(F.conv1d(xbc.transpose(1, 2), w, P["conv1d.bias"], padding=w.shape[-1] - 1, groups=conv_dim)[..., :s])
    xs, B, C = torch.split(xbc.transpose(1, 2), [d_inner, gn, gn], dim=-1)
    dt = F.softplus(dt + P["dt_bias"])
    A = -torch.exp(P["A_log"])
    xs = xs.reshape(b, s, heads, -1)
    B = B.reshape(b, s, groups, -1).repeat_interleave(heads // groups, dim=2)
    C = C.reshape(b, s, groups, -1).repeat_interleave(heads // groups, dim=2)
    y = ssd_minimal(xs * dt[..., None], A * dt, B, C, chunk) + xs * P["D"][:, None]
    g = (y.reshape(b, s, d_inner) * F.silu(z)).reshape(b, s, groups, -1)
    g = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-5)).reshape(b, s, d_inner) * P["norm.weight"]
    return (g @ P["out_proj.weight"].t()).transpose(0, 1)


def rel_err(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--groups", type=int, required=True)
    ap.add_argument("--chunk", type=int, required=True)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=2e-4)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t = read_safetensors(a.init)
    P = {n: t[PREFIX + n].clone().requires_grad_(True) for n in NAMES}
    if P["dt_bias"].numel() != a.heads:
        sys.exit(f"mamba2_torch_ref.py: --heads {a.heads} but dt_bias has {P['dt_bias'].numel()} entries")
    x = t["bench.x"].clone().requires_grad_(True)
    dy = t["bench.dy"]
    run = lambda: mixer(P, x, a.heads, a.groups, a.chunk, a.eps)  # noqa: E731
    y = run()
    y.backward(dy)
    errs = {"y": rel_err(y.detach(), t["bench.y"]), "dx": rel_err(x.grad, t["bench.dx"])}
    for n in NAMES:
        errs[n] = rel_err(P[n].grad, t["grad." + PREFIX + n])
    worst = max(errs, key=errs.get)
    fwd, bwd = [], []
    for i in range(a.warmup + a.iters):
        for v in list(P.values()) + [x]:
            v.grad = None
        t0 = time.perf_counter()
        y = run()
        t1 = time.perf_counter()
        y.backward(dy)
        t2 = time.perf_counter()
        if i >= a.warmup:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
    tot = sorted(f + b for f, b in zip(fwd, bwd))
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    print(json.dumps({"impl": "torch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "fwd_ms": med(fwd), "bwd_ms": med(bwd), "fwd_bwd_ms": tot[len(tot) // 2],
                      "max_rel_err": errs[worst], "worst": worst, "errors": errs}))
    sys.exit(0 if errs[worst] <= a.tolerance else 1)


if __name__ == "__main__":
    main()
