"""The PNGs of the routing analyses (matplotlib, Agg backend); each returns the path written."""
import os

import numpy as np

_PLT = []


def pyplot():
    """matplotlib.pyplot with the Agg backend, or None when matplotlib is not installed."""
    if not _PLT:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            _PLT.append(plt)
        except ImportError:
            _PLT.append(None)
    return _PLT[0]


def _save(fig, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
    return path


def coverage_curve(out_dir, sweep, curves, E):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for c in curves:
        ax.plot(sweep, c, color="lightgray", linewidth=0.5)
    ax.plot(sweep, np.mean(np.asarray(curves), axis=0), color="C0", linewidth=2,
            label="mean across MoE layers")
    ax.plot(sweep, [n / E for n in sweep], color="red", linewidth=1.5, linestyle="--",
            label="uniform baseline (no concentration)")
    ax.set_xlabel("N (top-N most-frequent experts)")
    ax.set_ylabel("Fraction of total activations covered")
    ax.set_xscale("log")
    ax.set_xlim(1, max(E, 2))
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("Top-N coverage per layer (gray) and mean (blue)\n"
                 "above the red line: concentrated; on it: uniform routing")
    return _save(fig, out_dir, "coverage_curve.png")


def expert_layer_heatmap(out_dir, mat, labels):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(min(24, max(8, len(labels) * 0.2)), 8))
    im = ax.imshow(mat, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_xlabel("MoE layer")
    ax.set_ylabel("Expert (top-%d by overall frequency, hottest at top)" % mat.shape[0])
    ax.set_title("Per-(expert x layer) activation rate")
    fig.colorbar(im, ax=ax, label="Share of the layer's token-expert activations")
    return _save(fig, out_dir, "expert_layer_heatmap.png")


def predictability(out_dir, rows):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.3), 4))
    x = list(range(len(rows)))
    ax.plot(x, [r[2] for r in rows], marker="o", label="cosine similarity")
    ax.plot(x, [r[3] for r in rows], marker="s", label="Spearman correlation")
    ax.axhline(0.9, color="green", linestyle=":", linewidth=1, label="cos >= 0.90")
    ax.set_xticks(x)
    ax.set_xticklabels(["%s\u2192%s" % (r[0], r[1]) for r in rows], rotation=90, fontsize=6)
    ax.set_ylim(min(0, np.nanmin([r[3] for r in rows] + [0])), 1.05)
    ax.set_ylabel("Score")
    ax.set_xlabel("Consecutive MoE layer pair (L_prev \u2192 L)")
    ax.legend()
    ax.set_title("Distribution predictability: L's router on L_prev's hidden states")
    return _save(fig, out_dir, "predictability_per_layer.png")


def layer_step_heatmap(out_dir, name, mat, labels, steps, title, cbar):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(min(16, max(8, len(steps) * 0.15)), min(12, max(4, len(labels) * 0.25))))
    im = ax.imshow(mat, aspect="auto", cmap="magma", interpolation="nearest")
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=6)
    idx = list(range(0, len(steps), max(1, len(steps) // 20)))
    ax.set_xticks(idx)
    ax.set_xticklabels([str(steps[i]) for i in idx], rotation=90, fontsize=6)
    ax.set_xlabel("step")
    ax.set_ylabel("MoE layer")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label=cbar)
    return _save(fig, out_dir, name)


def lines_over_steps(out_dir, name, steps, series, title, ylabel):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, ys in series:
        ax.plot(steps, ys, linewidth=1, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if len(series) <= 16:
        ax.legend(fontsize=6)
    return _save(fig, out_dir, name)


def coactivation(out_dir, label, mat):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 6))
    im = ax.imshow(mat, cmap="viridis", interpolation="nearest")
    ax.set_xlabel("expert")
    ax.set_ylabel("expert")
    ax.set_title("Co-activation in a token's top-k, layer %s\n(share of tokens; diagonal: the expert alone)" % label)
    fig.colorbar(im, ax=ax, label="share of tokens")
    return _save(fig, out_dir, "coactivation_%s.png" % label.replace(":", "_"))
