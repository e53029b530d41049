#!/usr/bin/env python3
"""Builds the tiny GPT-2 style BPE vocabulary used by tests/unit/test_tokenizer.cpp.

Trains 200 byte-level BPE merges on the short text below (written for this repository, no third
party text), with the GPT-2 alphabet (bytes_to_unicode) and an ASCII version of the GPT-2
pre-tokenizer pattern, then writes vocab.json (256 byte symbols in GPT-2 order, the merged
symbols in merge order, "<|endoftext|>" last) and merges.txt ("#version: 0.2" then one merge a
line). With --expect it prints the ids that openai/gpt-2's encoder.py algorithm gives for the
test strings (the expected values hard-coded in the test).
Usage: python3 make_vocab.py [--expect]     (run in this folder; deterministic)
"""
import json, re, sys, collections

TEXT = """
The training loop reads tokens from the dataset, runs the model forward and backward, and updates
the weights with the optimizer. Every step logs the loss, the learning rate and the gradient norm.
A checkpoint is written every hundred steps, and the run can be resumed from the latest one.
Tokens are integers; the tokenizer turns text into tokens and tokens back into text. The byte level
tokenizer uses one token per byte, while the BPE tokenizer merges frequent pairs of symbols into
longer symbols, so that common words become a single token. We're testing it: they'll see that the
merges don't change the text, and it's still the same text after decoding. In 2024 there were 365
days, 12 months and 52 weeks; the model has 4 layers and 256 hidden units.
The quick brown fox jumps over the lazy dog. The lazy dog sleeps in the sun, and the fox runs on.
"""

PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs])), bs


def train(num_merges=200):
    enc, order = bytes_to_unicode()
    words = collections.Counter(tuple(enc[b] for b in w.encode()) for w in PAT.findall(TEXT))
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))  # most frequent, ties by symbol order
        merges.append(best)
        new = collections.Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1]); i += 2
                else:
                    out.append(w[i]); i += 1
            new[tuple(out)] += c
        words = new
    vocab = {}
    for b in order:
        vocab[enc[b]] = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


def bpe(token, ranks):  # openai/gpt-2 src/encoder.py Encoder.bpe
    word = tuple(token)
    while len(word) > 1:
        pairs = set(zip(word, word[1:]))
        bigram = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new, i = [], 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new.extend(word[i:]); break
            new.extend(word[i:j]); i = j
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new.append(first + second); i += 2
            else:
                new.append(word[i]); i += 1
        word = tuple(new)
    return word


def encode(text, vocab, merges):
    enc, _ = bytes_to_unicode()
    ranks = {m: r for r, m in enumerate(merges)}
    ids = []
    for piece in PAT.findall(text):
        ids += [vocab[s] for s in bpe("".join(enc[b] for b in piece.encode()), ranks)]
    return ids


if __name__ == "__main__":
    vocab, merges = train()
    if "--expect" in sys.argv:
        for s in ["The quick brown fox.", "We're testing the tokenizer's merges!", "In 2024:  365 days\n\nthe end  ",
                  "hello world"]:
            print(json.dumps(s), encode(s, vocab, merges))
    else:
        with open("vocab.json", "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open("merges.txt", "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n")
            for a, b in merges:
                f.write(f"{a} {b}\n")
        print(f"vocab.json: {len(vocab)} tokens, merges.txt: {len(merges)} merges")
