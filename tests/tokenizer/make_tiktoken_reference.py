#!/usr/bin/env python3
"""Reference tokenizations of Megatron's TikTokenizer by the `tiktoken` package (for
tests/unit/test_tokenizer_reference.cpp, tag [tiktoken_reference]).

Learns a byte-level BPE vocabulary over the license corpus and a Unicode-heavy text set (letters of
many scripts, digits, whitespace runs, CRLF, emoji) with `tokenizers`' trainer, writes it in
Megatron's vocabulary format (a JSON list of {"rank", "token_bytes" (base64), "token_str"}; entries
0..255 the single bytes), adds whole-word tokens that the merges do not build and tokens that end
inside a UTF-8 character, and builds tiktoken.Encoding from it exactly as Megatron-Core's
TikTokenTokenizer does (megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py:
reload_mergeable_ranks with the num_special_tokens shift, the special tokens and <SPECIAL_k>
fillers as ids 0..num_special_tokens-1, _PATTERN_TIKTOKEN_V1 / _V2). Two configurations:
  tiktoken_v2  pattern v2, Megatron's defaults (1000 special tokens, the seven default ones),
               the vocabulary size the whole file;
  tiktoken_v1  pattern v1, 20 special tokens from a custom list (in another order, with
               <|im_start|> and <|im_end|>), the vocabulary size 60 entries short of the file
               (Megatron cuts the file to vocab_size - num_special_tokens entries).
For each: encode = Encoding.encode(text, allowed_special="all") (Megatron-Core's text_to_ids),
decode = Encoding.decode (ids_to_text), over make_reference.py's inputs (adversarial Unicode,
invalid UTF-8 decoded with errors="replace", special tokens in text, license paragraphs) and
tiktoken-specific ones; plus the decode of every single id (NAME.single) and the special tokens'
ids (NAME.json "special_ids").

Output (--out DIR): the files make_reference.py writes (inputs.bin, NAME.json, NAME.ids,
NAME.decoded), NAME.single, and DIR/vocab.json.
Run with the test environment's Python (.pyenv/bin/python, made by scripts/setup.sh).
"""
import argparse
import base64
import collections
import json
import os
import random
import re
import sys

import tiktoken
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import adversarial_inputs, read_corpus, write_records, write_reference  # noqa: E402

# Megatron-Core's patterns (tiktoken_tokenizer.py), as written there.
PATTERN_V1 = r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
PATTERN_V2 = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"  # noqa: E501
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"]
TRAIN_VOCAB = 1000  # 256 bytes + 744 merges

UNICODE_TEXTS = [
    "Hello\r\nWorld\r\n\r\nCRLF lines\r\n", "tabs\t\tand\t spaces  \n  mixed \r\n\t", "a / b // c /// d/e/f\n/\r\n",
    "CamelCaseWords HTTPServer XMLHttpRequest iPhone eBay MiXeD ALLCAPS lowercase", "\u01c5ungla \u01c8ubljana \u01cbegoš",
    "modifier \u02b0\u02b2 letters \u02e0\u02e4 and \u1d2c\u1d2e", "digits 0123456789 ٠١٢٣٤٥٦٧٨٩ ०१२३ ⅠⅡⅢ ½¾ ①②",
    "Zürich Ærø Øresund Ångström naïve café résumé façade", "Ελληνικά κείμενα με τόνους ΆΈΉ", "Русский текст, Ёлка, ЁЖ",
    "日本語のテキストと漢字、ひらがな、カタカナ。", "中文文本，标点符号。", "한국어 텍스트입니다", "עברית וערבית: مرحبا بالعالم",
    "हिन्दी पाठ और संयुक्ताक्षर क्षत्रज्ञ", "ภาษาไทย ไม่มีช่องว่าง", "emoji 👍🏽 👩‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷 😀😃😄",
    "combining e\u0301 a\u0308 o\u0302\u0323 \u0041\u030a", "  leading spaces and trailing   ", "x" + " " * 17 + "y",
    "\n\n\n\nparagraphs\n\n\nend\n", "code:\n    def f(x):\n        return x ** 2  # comment\n", "punct!!! ??? ... --- (([[{{",
    "quotes \"double\" 'single' «guillemets» „German“", "URLs https://example.com/a/b?c=d&e=f#g and a@b.co",
    "<s>special</s> inside <pad><pad> and <unk> <|im_start|>user\nhi<|im_end|> <SPECIAL_12> <SPECIAL_999>",
    "near misses <s <s/> </ s> <pad <SPECIAL_> <SPECIAL_x>", "nbsp\u00a0thin\u2009ideographic\u3000nel\u0085ls\u2028ps\u2029",
]


def bytes_to_unicode():
    """GPT-2's byte → printable character table (the ByteLevel alphabet of `tokenizers`)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def learn_vocab(lines):
    """Byte-level BPE merges (tokenizers' trainer, the v2 split), as byte strings in merge order."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN_V2), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=TRAIN_VOCAB, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    decoder = {c: b for b, c in bytes_to_unicode().items()}
    merges = json.loads(tok.to_str())["model"]["merges"]
    vocab = [bytes([b]) for b in range(256)]
    seen = set(vocab)
    for m in merges:
        a, b = m.split(" ") if isinstance(m, str) else m
        token = bytes(decoder[c] for c in a + b)
        if token not in seen:
            seen.add(token)
            vocab.append(token)
    return vocab


def extra_tokens(corpus_text, vocab):
    """Whole words the merges do not make (tiktoken takes a piece that is a token as one id) and
    tokens ending inside a UTF-8 character."""
    seen = set(vocab)
    words = collections.Counter(re.findall(r" [A-Za-z]{7,12}", corpus_text))
    out = [w.encode() for w, _ in words.most_common(400) if w.encode() not in seen][:80]
    out += ["日本".encode()[:4], "é".encode()[:1] + b"x", "👍".encode()[:3], b" \xce"]
    return [t for t in dict.fromkeys(out) if t not in seen]


def write_vocab(path, vocab):
    entries = [{"rank": i, "token_bytes": base64.b64encode(t).decode("ascii"),
                "token_str": t.decode("utf-8", errors="replace")} for i, t in enumerate(vocab)]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(entries, f, ensure_ascii=False)


def megatron_encoding(path, pattern, vocab_size, num_special_tokens, special_tokens):
    """tiktoken.Encoding as Megatron-Core's TikTokenTokenizer builds it."""
    specials = list(special_tokens or SPECIAL_TOKENS)
    assert len(specials) == len(set(specials)) and len(specials) <= num_special_tokens < vocab_size
    assert set(SPECIAL_TOKENS) <= set(specials)
    specials += ["<SPECIAL_{id}>".format(id=i) for i in range(len(specials), num_special_tokens)]
    with open(path, "r") as f:
        entries = json.load(f)[:vocab_size - num_special_tokens]  # reload_mergeable_ranks(max_vocab=inner)
    ranks = {}
    for i, x in enumerate(entries):
        assert x.keys() == {"rank", "token_bytes", "token_str"} and x["rank"] == i
        merge = base64.b64decode(x["token_bytes"])
        assert i >= 256 or merge == bytes([i])
        ranks[merge] = x["rank"] + num_special_tokens
    assert set(ranks.values()) == set(range(num_special_tokens, vocab_size))
    enc = tiktoken.Encoding(name=os.path.basename(os.path.dirname(path)), pat_str={"v1": PATTERN_V1, "v2": PATTERN_V2}[pattern],
                            mergeable_ranks=ranks, special_tokens={t: i for i, t in enumerate(specials)})
    return enc, specials


def reference(out, name, vocab_path, inputs, pattern, vocab_size, num_special_tokens, special_tokens):
    enc, specials = megatron_encoding(vocab_path, pattern, vocab_size, num_special_tokens, special_tokens)
    meta = {"type": "TikTokenizer", "model": vocab_path, "vocab_size": vocab_size, "eod": specials.index("</s>"),
            "bos": specials.index("<s>"), "include_special_tokens": True, "tiktoken_pattern": pattern,
            "tiktoken_num_special_tokens": num_special_tokens, "tokenizer_special_tokens": special_tokens or [],
            "special_ids": {t: enc.encode_single_token(t) for t in specials[:30]}}
    assert enc.n_vocab == vocab_size
    write_reference(out, name, meta, inputs, lambda text: enc.encode(text, allowed_special="all"), enc.decode)
    write_records(os.path.join(out, name + ".single"), [enc.decode([i]).encode("utf-8") for i in range(vocab_size)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus-bytes", type=int, default=600_000)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    corpus = read_corpus(args.corpus_bytes)
    text = corpus.decode("utf-8", "replace")
    lines = text.split("\n") + UNICODE_TEXTS * 30
    vocab = learn_vocab(lines)
    vocab += extra_tokens(text, vocab)
    vocab_path = os.path.join(args.out, "vocab.json")
    write_vocab(vocab_path, vocab)

    paragraphs = [p for p in corpus.split(b"\n\n") if p.strip()]
    rng = random.Random(38)
    long_pieces = ["a" * 3000, " " * 5000, "ab" * 2000, "\r\n" * 1000, "".join(rng.choice("etaoinsh") for _ in range(4000)),
                   "\u00e9" * 1500, "7" * 2000, "!?" * 1500]  # long pieces: the merge loop beyond short words
    inputs = (adversarial_inputs() + [t.encode("utf-8") for t in UNICODE_TEXTS + long_pieces] + paragraphs +
              [corpus])
    write_records(os.path.join(args.out, "inputs.bin"), inputs)
    print("tiktoken reference: vocabulary of %d entries, %d inputs" % (len(vocab), len(inputs)))
    reference(args.out, "tiktoken_v2", vocab_path, inputs, "v2", 1000 + len(vocab), 1000, None)
    custom = ["<pad>", "<|im_start|>", "</s>", "<s>", "<unk>", "<|im_end|>", "<sep>", "<cls>", "<mask>"]
    reference(args.out, "tiktoken_v1", vocab_path, inputs, "v1", 20 + len(vocab) - 60, 20, custom)
    return 0


if __name__ == "__main__":
    sys.exit(main())
