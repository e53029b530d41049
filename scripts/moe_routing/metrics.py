"""Similarity and distance measures of per-expert count vectors (numpy, float64)."""
import numpy as np


def cosine(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else float("nan")


def average_ranks(x):
    """1-based ranks, ties sharing their average rank."""
    x = np.asarray(x, float)
    order = np.argsort(x, kind="stable")
    sx = x[order]
    starts = np.flatnonzero(np.r_[True, sx[1:] != sx[:-1]])
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x))
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e - 1) / 2.0 + 1.0
    return ranks


def pearson(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    da, db = a - a.mean(), b - b.mean()
    va, vb = (da * da).sum(), (db * db).sum()
    return float((da * db).sum() / np.sqrt(va * vb)) if va > 0 and vb > 0 else float("nan")


def spearman(a, b):
    return pearson(average_ranks(a), average_ranks(b))


def hot_overlap(a, b, m):
    """|top_m(a) & top_m(b)| / m, ties to the lower expert id."""
    ta = set(np.argsort(-np.asarray(a, float), kind="stable")[:m].tolist())
    tb = set(np.argsort(-np.asarray(b, float), kind="stable")[:m].tolist())
    return len(ta & tb) / m if m else float("nan")


def distribution(counts):
    c = np.asarray(counts, float)
    s = c.sum()
    return c / s if s > 0 else c


def js_divergence(p, q):
    """Jensen-Shannon divergence in bits (0..1) of two distributions."""
    p, q = distribution(p), distribution(q)
    m = 0.5 * (p + q)

    def kl(x):
        nz = x > 0
        return float((x[nz] * np.log2(x[nz] / m[nz])).sum())
    return 0.5 * kl(p) + 0.5 * kl(q)


def l1_distance(p, q):
    return float(np.abs(distribution(p) - distribution(q)).sum())
