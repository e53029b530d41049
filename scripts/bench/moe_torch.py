"""The MLP slot of the PyTorch eager reference (scripts/bench/gpt_train_torch.py): the dense MLP
(GeLU or SwiGLU, biases) and the mixture-of-experts layer with Megatron-Core's semantics, as
Strata's models/layers/moe/ implements them:
  router   logits = x . W_r^T in fp32; scores softmax (top-k of the logits, then softmax over the
           k; or, pre-softmax, softmax over all experts, then top-k), sigmoid or sqrt(softplus)
           (top-k, normalised over the k + 1e-20 when k > 1); times the top-k scaling factor
           (TopKRouter.routing, moe_utils.topk_routing_with_score_function);
  losses   aux_loss / seq_aux_loss / global_aux_loss (Switch loss from the unbiased normalised
           scores of all experts and a plain top-k map: coeff . E / (k . T^2) . sum_e P_e . n_e,
           per sequence / b for seq_aux_loss; one micro-batch per step, so global = aux) and the
           z-loss coeff . mean(logsumexp(logits)^2), each added to the objective with gradient
           scale 1 (MoEAuxLossAutoScaler with one fp32 micro-batch);
  experts  tokens permuted by expert (stable), each expert linear_fc1 -> GeLU / SwiGLU ->
           x routing probability (or on the input: moe_apply_probs_on_input) -> linear_fc2, no
           biases; unpermuted by summing each token's k rows (moe_utils.permute / unpermute,
           experts.py);
  shared   an optional shared-expert MLP (biases as the dense MLP) with an optional sigmoid gate
           sigmoid(x . g^T) (shared_experts.py).
Options the reference does not model are refused by `strata bench train` before it runs this."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def add_args(p):
    p.add_argument("--swiglu", action="store_true")
    p.add_argument("--moe-experts", type=int, default=0, help="0: a dense model")
    p.add_argument("--moe-ffn", type=int, default=0)
    p.add_argument("--moe-topk", type=int, default=2)
    p.add_argument("--moe-score", default="softmax", choices=["softmax", "sigmoid", "sqrtsoftplus"])
    p.add_argument("--moe-pre-softmax", action="store_true")
    p.add_argument("--moe-scaling", type=float, default=1.0)
    p.add_argument("--moe-layers", default="", help="comma list of 0/1 per layer (default: all MoE)")
    for loss in ("aux_loss", "seq_aux_loss", "global_aux_loss"):
        p.add_argument("--moe-" + loss, type=float, default=0.0, dest="moe_" + loss)
    p.add_argument("--moe-z-loss", type=float, default=0.0)
    p.add_argument("--moe-shared", type=int, default=0, help="shared-expert FFN size (0: none)")
    p.add_argument("--moe-shared-gate", action="store_true")
    p.add_argument("--moe-probs-on-input", action="store_true")


def activation(h, a):
    if a.swiglu:
        gate, up = h.chunk(2, dim=-1)  # Megatron's [gate | up] halves
        return F.silu(gate) * up
    return F.gelu(h, approximate="tanh" if a.tanh_gelu else "none")


class MLP(nn.Module):
    def __init__(self, h, ffn, a):
        super().__init__()
        self.a = a
        self.fc1 = nn.Linear(h, 2 * ffn if a.swiglu else ffn, bias=not a.no_bias_linear)
        self.fc2 = nn.Linear(ffn, h, bias=not a.no_bias_linear)

    def forward(self, x):
        return self.fc2(activation(self.fc1(x), self.a)), x.new_zeros(())


def scores_of(logits, fn):
    return torch.sigmoid(logits) if fn == "sigmoid" else torch.sqrt(F.softplus(logits))


class MoE(nn.Module):
    def __init__(self, h, a):
        super().__init__()
        self.a, E, f = a, a.moe_experts, a.moe_ffn
        self.router = nn.Parameter(torch.empty(E, h))
        self.fc1 = nn.ParameterList(nn.Parameter(torch.empty(2 * f if a.swiglu else f, h)) for _ in range(E))
        self.fc2 = nn.ParameterList(nn.Parameter(torch.empty(h, f)) for _ in range(E))
        self.shared = MLP(h, a.moe_shared, a) if a.moe_shared else None
        self.gate = nn.Parameter(torch.empty(1, h)) if a.moe_shared_gate else None

    def init_weights(self, std, out_std):  # Megatron: N(0, std), output layers N(0, std / sqrt(2L))
        for p in [self.router, *self.fc1] + ([self.gate] if self.gate is not None else []):
            nn.init.normal_(p, 0.0, std)
        for p in self.fc2:
            nn.init.normal_(p, 0.0, out_std)

    def route(self, logits):  # -> top-k probabilities [T, k], expert ids [T, k]
        a, k = self.a, self.a.moe_topk
        if a.moe_score == "softmax" and a.moe_pre_softmax:
            probs, idx = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)
        elif a.moe_score == "softmax":
            top, idx = torch.topk(logits, k, dim=-1)
            probs = torch.softmax(top, dim=-1)
        else:
            s = scores_of(logits, a.moe_score)
            _, idx = torch.topk(s, k, dim=-1)
            probs = s.gather(1, idx)
            if k > 1:
                probs = probs / (probs.sum(dim=-1, keepdim=True) + 1e-20)
        return probs * a.moe_scaling, idx

    def losses(self, logits, batch):
        a, (T, E), k = self.a, logits.shape, self.a.moe_topk
        total = logits.new_zeros(())
        if a.moe_z_loss > 0:
            total = total + a.moe_z_loss * torch.logsumexp(logits, dim=-1).square().mean()
        if a.moe_aux_loss + a.moe_seq_aux_loss + a.moe_global_aux_loss <= 0:
            return total
        if a.moe_score == "softmax":
            s = torch.softmax(logits, dim=-1)
        else:
            s = scores_of(logits, a.moe_score)
            s = s / (s.sum(dim=-1, keepdim=True) + 1e-20)
        counts_map = torch.zeros_like(s).scatter_(1, torch.topk(s, k, dim=-1)[1], 1.0).detach()
        for c in (a.moe_aux_loss, a.moe_global_aux_loss):  # one micro-batch: global_aux_loss = aux_loss
            if c > 0:
                total = total + (s.sum(0) * counts_map.sum(0)).sum() * (c * E / (k * T * T))
        if a.moe_seq_aux_loss > 0:  # tokens [b, s]: one sequence per batch row
            S = T // batch
            sb, mb = s.view(batch, S, E), counts_map.view(batch, S, E)
            total = total + (sb.sum(1) * mb.sum(1)).sum() * (a.moe_seq_aux_loss * E / (k * S * S) / batch)
        return total

    def forward(self, x):  # x [b, s, h] -> (y [b, s, h], router losses)
        a, (b, s, h) = self.a, x.shape
        xt = x.reshape(b * s, h)
        logits = xt @ self.router.t()
        probs, idx = self.route(logits)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)  # permute: by expert, then by token
        token = order // a.moe_topk
        xp, pp = xt[token], probs.reshape(-1)[order].unsqueeze(1)
        counts = torch.bincount(flat, minlength=a.moe_experts).tolist()
        ys = []
        for e, (xe, pe) in enumerate(zip(xp.split(counts), pp.split(counts))):
            if a.moe_probs_on_input:
                ys.append(activation((xe * pe) @ self.fc1[e].t(), a) @ self.fc2[e].t())
            else:
                ys.append((activation(xe @ self.fc1[e].t(), a) * pe) @ self.fc2[e].t())
        out = xt.new_zeros(b * s, h).index_add(0, token, torch.cat(ys))  # unpermute
        if self.shared is not None:
            sh = self.shared(xt)[0]
            out = out + (sh * torch.sigmoid(xt @ self.gate.t()) if self.gate is not None else sh)
        return out.view(b, s, h), self.losses(logits, b)
