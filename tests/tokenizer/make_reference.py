#!/usr/bin/env python3
"""Reference tokenizations for the tokenizer tests (tests/unit/test_tokenizer_reference.cpp).

Trains small tokenizers with the reference packages, each in a real family's configuration,
and writes what the packages make of a set of inputs, for Strata to reproduce token for token:
  - `tokenizers` (Hugging Face): byte-level BPE with Llama-3's split regex, special tokens and
    BOS template; Qwen2's regex with NFC; SentencePiece-style BPE with byte fallback as in the
    Llama-2 (Prepend/Replace normalizers) and Mistral (Metaspace) tokenizer.json files; and two
    files that exercise the remaining components (NFKC, Digits, ByteLevel's own regex, every
    Split behaviour, lstrip/rstrip added tokens, Strip/Replace decoders); and three whose Split and
    Replace regexes use what Oniguruma reads otherwise than PCRE2 (empty matches such as \b and
    (?=[A-Z]) under every behaviour and invert, \h, \v, ^ $ per line, (?m), isolated options, {n}?,
    {,n}, \w and \b with the Latin-1 table, POSIX brackets, nested classes and &&, scripts);
  - `sentencepiece`: a BPE model with byte fallback in Llama-2's trainer settings, and a default
    unigram model.
Inputs: the license corpus (/usr/share/common-licenses and /usr/share/doc/*/copyright, its raw
bytes, paragraphs and whole), adversarial Unicode, invalid UTF-8 (the references see it decoded
with errors="replace", Strata's documented repair), whitespace runs, digits and special tokens
inside text, and seeded random code points.

Output (--out DIR): DIR/inputs.bin (every input: u32 length + bytes), and per tokenizer NAME:
DIR/NAME/ (its files), DIR/NAME.json (type, model path, vocab size, EOD, BOS, whether special
tokens are included, and the inputs where decode(encode(x)) == x), DIR/NAME.ids (per input:
u32 count + i32 ids) and DIR/NAME.decoded (per input: u32 length + the decoded UTF-8).

Run with the test environment's Python (.pyenv/bin/python, made by scripts/setup.sh).
"""
import argparse
import glob
import json
import os
import random
import struct
import sys

import sentencepiece as spm
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
VOCAB_SIZE = 2000


def read_corpus(max_bytes):
    """The license texts as raw bytes, as scripts/prepare_corpus.sh gathers them."""
    out, total = [], 0
    for f in sorted(glob.glob('/usr/share/common-licenses/*')) + sorted(glob.glob('/usr/share/doc/*/copyright')):
        if not os.path.isfile(f) or os.path.islink(f):
            continue
        data = open(f, 'rb').read()
        if total + len(data) + 2 > max_bytes:
            continue
        out.append(data + b'\n\n')
        total += len(data) + 2
    return b''.join(out)


def adversarial_inputs():
    texts = [
        "", " ", "  leading and trailing  ", "tabs\tand\nnewlines\r\n\r\nend", "many     spaces      here",
        "\u00a0nbsp\u2009thin\u3000ideographic\u2028line\u2029para\u0085nel\u180emongolian",
        "digits 1234567890 12 3.14159 1,000,000 \u0663\u0664\u0665 \u00bd \u216b 2024-12-02",
        "combining: e\u0301 a\u0308 o\u0302\u0323 \u00c5 vs A\u030a, \ufb01 ligature, \uff46\uff55\uff4c\uff4c, \u2460\u2461",
        "emoji: \U0001f44d\U0001f3fd \U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 "
        "\U0001f3f3\ufe0f\u200d\U0001f308 \u2764\ufe0f \U0001f1eb\U0001f1f7",
        "CJK: \u6f22\u5b57\u304b\u306a\u4ea4\u3058\u308a\u6587\u3001\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8, "
        "\u4e2d\u6587\u6807\u70b9\u3002",
        "RTL: \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd \u0645\u0631\u062d\u0628\u0627 "
        "\u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u200f\u202bembedded\u202c",
        "special tokens <|begin_of_text|>inside<|end_of_text|> text <s> and </s> <|im_start|>user\nhi<|im_end|> "
        "<sep> x <sep>y<sep>",
        "<|begin_of_text|><|begin_of_text|>twice</s></s>",
        "contractions: I'm can't we'll they've she'd it's WE'RE DON'T",
        "code: def f(x):\n    return x**2  # comment\n\tif a==b: pass\n",
        "<0x41> literal byte token text and <unk>",
        "zero width\u200bspace, joiner\u200d and soft\u00adhyphen",
        "\x00 nul and \x1b[31m escape \x7f",
        "ends with spaces   ", "\n\n\n", "   \n  \n", "x", "\u2581 literal metaspace \u2581\u2581 and \u0120 literal",
        "UPPER lower MiXeD CamelCaseWords and snake_case_words",
        "punctuation!!! ??? ... --- ((nested)) [brackets] {braces} \"quotes\" 'single'",
    ]
    for n in range(1, 7):
        texts += ["a" + " " * n + "b", "a" + "\n" * n + "b", " " * n, "x" + "\t " * n, "9" * (n * 3)]
    rng = random.Random(25)
    ranges = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff), (0x900, 0x97f),
              (0x3040, 0x30ff), (0x4e00, 0x4fff), (0xac00, 0xacff), (0x1f300, 0x1f6ff), (0x2000, 0x206f),
              (0x300, 0x36f), (0xe000, 0xe0ff), (0x10000, 0x1007f)]
    for _ in range(60):
        chars = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(ranges)
            chars.append(chr(rng.randint(lo, hi)))
            if rng.random() < 0.2:
                chars.append(rng.choice(" \n\t"))
        texts.append(''.join(chars))
    raw = [t.encode('utf-8') for t in texts]
    raw += [b"valid \xff\xfe invalid", b"truncated \xe2\x82", b"overlong \xc0\xaf and \xe0\x80\x80",
            b"surrogate \xed\xa0\x80 x", b"\xf4\x90\x80\x80 beyond", b"mixed \xe2\x82\xac ok \xe2\x28\xa1 bad",
            b"\x80\x80\x80", b"\xf0\x9f\x98", b"a\xf0\x9f\x98b\xf0\x9f"]
    return raw


def save_hf(tok, directory, eos, bos=None, edit=None):
    os.makedirs(directory, exist_ok=True)
    spec = json.loads(tok.to_str())
    if edit:
        edit(spec)
    with open(os.path.join(directory, 'tokenizer.json'), 'w', encoding='utf-8') as f:
        json.dump(spec, f, ensure_ascii=False, indent=1)
    config = {"eos_token": eos}
    if bos:
        config["bos_token"] = {"content": bos, "lstrip": False, "normalized": False, "rstrip": False,
                               "single_word": False, "special": True}
    with open(os.path.join(directory, 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
        json.dump(config, f, indent=1)
    return Tokenizer.from_file(os.path.join(directory, 'tokenizer.json'))


def train_byte_level(lines, pattern, normalizer=None):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    if normalizer:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=VOCAB_SIZE, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def llama3(lines, out):
    tok = train_byte_level(lines, LLAMA3_PATTERN)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|eot_id|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return save_hf(tok, out, "<|end_of_text|>", "<|begin_of_text|>")


def qwen2(lines, out):
    tok = train_byte_level(lines, QWEN2_PATTERN, normalizers.NFC())
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return save_hf(tok, out, "<|endoftext|>")


def components(lines, out):
    """NFKC + Digits + ByteLevel's own regex with a prefix space; normalized lstrip/rstrip added token."""
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"\t+"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=VOCAB_SIZE, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    tok.add_tokens([AddedToken("<sep>", lstrip=True, rstrip=True, normalized=True, special=False)])
    return save_hf(tok, out, "<|endoftext|>")


def splits(lines, out):
    """Every Split behaviour, a String pattern and invert; Strip and Replace decoders."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[0-9]"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"[,;]"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"\p{Lu}"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[^\s]+"), behavior="isolated", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Replace("  ", " "),
                                     decoders.Strip(content=" ", left=1, right=0)])  # right > 0 panics on an empty text in tokenizers 0.23
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=VOCAB_SIZE, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(["</s>"])
    return save_hf(tok, out, "</s>")


def train_regex_splits(lines, splits, normalizer=None):
    """Byte-level BPE after a sequence of regex Splits (pattern, behaviour, invert)."""
    tok = Tokenizer(models.BPE())
    if normalizer:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior=b, invert=inv) for p, b, inv in splits] +
        [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=VOCAB_SIZE, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(["</s>"])
    return tok


def regex_empty(lines, out):
    """Empty matches: word boundaries, look-aheads and line anchors under every behaviour and invert."""
    return save_hf(train_regex_splits(lines, [
        (r"\b", "isolated", False),
        (r"(?=\p{Lu})", "merged_with_previous", False),
        (r"(?<=[.,;])", "merged_with_next", False),
        (r"$", "contiguous", False),
        (r"\B", "merged_with_previous", True),
        (r"(?=,)", "removed", False),
        (r"(?=[A-Z])", "merged_with_next", True),
        (r"x*", "contiguous", True),
    ], normalizers.Replace(Regex(r"(?<=\d)(?=(?:\d{3})+\b)"), "\u00b7")), out, "</s>")


def regex_escapes(lines, out):
    """\h, \v, ^ $, (?m), isolated options, quantifiers, \w/\b and POSIX brackets, classes, scripts."""
    return save_hf(train_regex_splits(lines, [
        (r"\h{2,}|\H\v", "isolated", False),
        (r"(?m)^.|.$", "merged_with_next", False),
        (r"a(?i)n|the", "isolated", False),
        (r"(?x) \d{2}? \. | o{,2}n # comment", "contiguous", False),
        (r"\w{3,2}|[[:punct:]&&[^.,]]+", "merged_with_previous", False),
        (r"[\p{Greek}\p{Cyrillic}[\u05d0-\u05ea]]+|\p{Han}", "isolated", False),
    ], normalizers.Replace(Regex(r"(?i)\bCOPYRIGHT\b|\x{2014}"), "(c)")), out, "</s>")


def regex_classes(lines, out):
    """POSIX brackets and properties (Oniguruma's sets), negated and nested classes, inverted splits."""
    return save_hf(train_regex_splits(lines, [
        (r"[[:alpha:]]+|[[:digit:]]+", "removed", True),
        (r"[^\w\s]|\p{Punct}", "isolated", False),
        (r"[[:space:][:cntrl:]]+", "merged_with_next", False),
        (r"[\w&&[^\d_]]{6,}", "isolated", True),
    ]), out, "</s>")


def add_byte_fallback_vocab(spec):
    """<0x00>..<0xFF> in the model's vocabulary after <unk> <s> </s>, as in Llama-2's tokenizer.json."""
    vocab = spec["model"]["vocab"]
    shifted = {}
    for token, i in vocab.items():
        shifted[token] = i if i < 3 else i + 256
    for b in range(256):
        shifted["<0x%02X>" % b] = 3 + b
    spec["model"]["vocab"] = shifted
    for t in spec["added_tokens"]:
        assert t["id"] < 3


def train_sentencepiece_bpe(lines):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=VOCAB_SIZE, show_progress=False, limit_alphabet=120,
                                                       special_tokens=["<unk>", "<s>", "</s>"]))
    return tok


def sp_decoders(spec, metaspace_decoder):
    if metaspace_decoder:
        spec["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}]}
    else:
        spec["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    spec["post_processor"] = {
        "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                 {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}


def llama2_hf(tok, out):
    def edit(spec):
        add_byte_fallback_vocab(spec)
        spec["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        spec["pre_tokenizer"] = None
        sp_decoders(spec, metaspace_decoder=False)
    return save_hf(tok, out, "</s>", "<s>", edit)


def mistral_hf(tok, out):
    def edit(spec):
        add_byte_fallback_vocab(spec)
        spec["normalizer"] = None
        spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                 "split": False}
        sp_decoders(spec, metaspace_decoder=True)
    return save_hf(tok, out, "</s>", "<s>", edit)


def sentencepiece_model(train_file, out, **settings):
    os.makedirs(out, exist_ok=True)
    spm.SentencePieceTrainer.train(input=train_file, model_prefix=os.path.join(out, 'tokenizer'),
                                   vocab_size=VOCAB_SIZE, minloglevel=2, **settings)
    return spm.SentencePieceProcessor(model_file=os.path.join(out, 'tokenizer.model'))


def write_records(path, records):
    with open(path, 'wb') as f:
        for r in records:
            f.write(struct.pack('<I', len(r)))
            f.write(r)


def write_reference(out, name, meta, inputs, encode, decode):
    ids = [encode(x.decode('utf-8', 'replace')) for x in inputs]
    decoded = [decode(i) for i in ids]
    meta["roundtrip"] = [k for k, x in enumerate(inputs) if decoded[k] == x.decode('utf-8', 'replace')]
    with open(os.path.join(out, name + '.json'), 'w') as f:
        json.dump(meta, f)
    write_records(os.path.join(out, name + '.ids'), [struct.pack('<%di' % len(i), *i) for i in ids])
    write_records(os.path.join(out, name + '.decoded'), [d.encode('utf-8') for d in decoded])
    print("%-14s %s: vocab %d, %d inputs, %d tokens, %d round trips" %
          (name, meta["type"], meta["vocab_size"], len(inputs), sum(map(len, ids)), len(meta["roundtrip"])))


def hf_reference(out, name, tok, eos, bos, inputs, include_special_tokens=True):
    meta = {"type": "HuggingFaceTokenizer", "model": os.path.join(out, name.split('.')[0]),
            "vocab_size": tok.get_vocab_size(with_added_tokens=True), "eod": tok.token_to_id(eos),
            "bos": tok.token_to_id(bos) if bos else None, "include_special_tokens": include_special_tokens}

    def encode(text):
        return tok.encode(text, add_special_tokens=include_special_tokens).ids

    def decode(ids):
        # Megatron's ids_to_text: the tokens (special ones left out with include_special_tokens off)
        # through the decoder (transformers' convert_tokens_to_string).
        tokens = [tok.id_to_token(i) for i in ids]
        if not include_special_tokens:
            specials = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
            tokens = [t for t in tokens if t not in specials]
        text = tok.decoder.decode(tokens)
        assert text == tok.decode(ids, skip_special_tokens=not include_special_tokens), name
        return text
    write_reference(out, name, meta, inputs, encode, decode)


def sp_reference(out, name, sp, inputs, type_name):
    meta = {"type": type_name, "model": os.path.join(out, name, 'tokenizer.model'), "vocab_size": sp.get_piece_size(),
            "eod": sp.eos_id(), "bos": sp.bos_id() if sp.bos_id() >= 0 else None, "include_special_tokens": True}
    write_reference(out, name, meta, inputs, sp.encode_as_ids, sp.decode_ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', required=True)
    ap.add_argument('--corpus-bytes', type=int, default=4_000_000)
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)
    corpus = read_corpus(args.corpus_bytes)
    text = corpus.decode('utf-8', 'replace')
    lines = text[:1_000_000].split('\n')  # the tokenizers train on the first megabyte
    train_file = os.path.join(out, 'train.txt')
    with open(train_file, 'w', encoding='utf-8') as f:
        f.write(text[:1_000_000])
    paragraphs = [p for p in corpus.split(b'\n\n') if p.strip()]
    inputs = adversarial_inputs() + paragraphs + [corpus]
    write_records(os.path.join(out, 'inputs.bin'), inputs)
    print("tokenizer reference: %d inputs, corpus %.1f MB in %d paragraphs" %
          (len(inputs), len(corpus) / 1e6, len(paragraphs)))

    tok = llama3(lines, os.path.join(out, 'llama3'))
    hf_reference(out, 'llama3', tok, "<|end_of_text|>", "<|begin_of_text|>", inputs)
    hf_reference(out, 'llama3.no_special', tok, "<|end_of_text|>", "<|begin_of_text|>", inputs, False)
    tok = qwen2(lines, os.path.join(out, 'qwen2'))
    hf_reference(out, 'qwen2', tok, "<|endoftext|>", None, inputs)
    tok = components(lines, os.path.join(out, 'components'))
    hf_reference(out, 'components', tok, "<|endoftext|>", None, inputs)
    tok = splits(lines, os.path.join(out, 'splits'))
    hf_reference(out, 'splits', tok, "</s>", None, inputs)
    for name, make in (('regex_empty', regex_empty), ('regex_escapes', regex_escapes), ('regex_classes', regex_classes)):
        tok = make(lines, os.path.join(out, name))
        hf_reference(out, name, tok, "</s>", None, inputs)
    sp_bpe = train_sentencepiece_bpe(lines)
    tok = llama2_hf(sp_bpe, os.path.join(out, 'llama2_hf'))
    hf_reference(out, 'llama2_hf', tok, "</s>", "<s>", inputs)
    tok = mistral_hf(sp_bpe, os.path.join(out, 'mistral_hf'))
    hf_reference(out, 'mistral_hf', tok, "</s>", "<s>", inputs)
    hf_reference(out, 'mistral_hf.no_special', tok, "</s>", "<s>", inputs, False)

    # Llama-2's SentencePiece trainer settings (BPE, byte fallback, digits split, identity normalization).
    sp = sentencepiece_model(train_file, os.path.join(out, 'llama2_sp'), model_type='bpe', byte_fallback=True,
                             split_digits=True, normalization_rule_name='identity', remove_extra_whitespaces=False,
                             allow_whitespace_only_pieces=True, add_dummy_prefix=True, character_coverage=0.9995,
                             unk_id=0, bos_id=1, eos_id=2, pad_id=-1, max_sentence_length=1 << 16)
    sp_reference(out, 'llama2_sp', sp, inputs, 'Llama2Tokenizer')
    sp = sentencepiece_model(train_file, os.path.join(out, 'unigram_sp'), model_type='unigram', pad_id=3,
                             max_sentence_length=1 << 16)
    sp_reference(out, 'unigram_sp', sp, inputs, 'SentencePieceTokenizer')
    os.remove(train_file)
    return 0


if __name__ == '__main__':
    sys.exit(main())
