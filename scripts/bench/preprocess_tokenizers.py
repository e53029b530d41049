#!/usr/bin/env python3
"""`strata preprocess` throughput against the `tokenizers` package's batch encoder, in one command.

Both tokenize the same documents (the license corpus's paragraphs, repeated --repeat times, as
JSONL) with the same tokenizer.json and the same number of threads: Strata with
`strata preprocess --workers N` (reading the JSONL and writing the .bin/.idx included), the
reference with Tokenizer.encode_batch (RAYON_NUM_THREADS=N, reading and writing excluded). Each is
timed --repeat-runs times (best kept), the token counts are checked equal, and the ratio is
printed: MB/s and tokens/s, Strata over tokenizers (> 1: Strata is faster).

  .pyenv/bin/python scripts/bench/preprocess_tokenizers.py --strata build/strata [--threads 1 2]
Without --tokenizer it trains the Llama-3-style tokenizer of tests/tokenizer/make_reference.py.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

REFERENCE_RUN = r"""
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
docs = open(sys.argv[2], encoding='utf-8', newline='\n').read().split('\n')[:-1]
best = None
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    enc = tok.encode_batch(docs)
    dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
print(best, sum(len(e.ids) for e in enc))
"""


def load_reference_module():
    spec = importlib.util.spec_from_file_location("make_reference",
                                                  os.path.join(ROOT, "tests", "tokenizer", "make_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True, help="the strata binary")
    ap.add_argument("--tokenizer", help="a directory with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=2, help="copies of the corpus")
    ap.add_argument("--runs", type=int, default=2, help="timed runs per side (best kept)")
    args = ap.parse_args()
    ref = load_reference_module()
    work = tempfile.mkdtemp(prefix="strata_bench_tok_")
    corpus = ref.read_corpus(4_000_000)
    docs = [p.decode("utf-8", "replace") for p in corpus.split(b"\n\n") if p.strip()] * args.repeat
    tokenizer_dir = args.tokenizer
    if not tokenizer_dir:
        tokenizer_dir = os.path.join(work, "llama3")
        ref.llama3(corpus.decode("utf-8", "replace")[:1_000_000].split("\n"), tokenizer_dir)
    jsonl = os.path.join(work, "docs.jsonl")
    lines = os.path.join(work, "docs.txt")
    # The reference reads one document per line, so both sides get the documents without newlines.
    with open(jsonl, "w", encoding="utf-8") as f, open(lines, "w", encoding="utf-8") as g:
        for d in docs:
            f.write(json.dumps({"text": d.replace("\n", " ")}) + "\n")
            g.write(d.replace("\n", " ") + "\n")
    mb = sum(len(d.replace("\n", " ").encode("utf-8")) for d in docs) / 1e6
    print("corpus: %d documents, %.1f MB; tokenizer %s; machine: %s, %d cores" %
          (len(docs), mb, tokenizer_dir, os.uname().machine, os.cpu_count()))
    print("%-8s %-12s %10s %12s %10s" % ("threads", "side", "MB/s", "tokens/s", "seconds"))
    for n in args.threads:
        best, tokens = None, None
        for _ in range(args.runs):
            t0 = time.perf_counter()
            out = subprocess.run([args.strata, "preprocess", "--input", jsonl, "--output-prefix",
                                  os.path.join(work, "out"), "--tokenizer-type", "HuggingFaceTokenizer",
                                  "--tokenizer-model", tokenizer_dir, "--workers", str(n)],
                                 check=True, capture_output=True, text=True).stdout
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
            tokens = int(out.split(" tokens")[0].split()[-1])
        env = dict(os.environ, RAYON_NUM_THREADS=str(n), TOKENIZERS_PARALLELISM="true")
        r = subprocess.run([sys.executable, "-c", REFERENCE_RUN, os.path.join(tokenizer_dir, "tokenizer.json"), lines,
                            str(args.runs)], check=True, capture_output=True, text=True, env=env).stdout.split()
        ref_s, ref_tokens = float(r[0]), int(r[1])
        assert ref_tokens == tokens, "token counts differ: strata %d, tokenizers %d" % (tokens, ref_tokens)
        print("%-8d %-12s %10.2f %12.0f %10.2f" % (n, "strata", mb / best, tokens / best, best))
        print("%-8d %-12s %10.2f %12.0f %10.2f" % (n, "tokenizers", mb / ref_s, tokens / ref_s, ref_s))
        print("%-8d ratio strata/tokenizers: %.2f" % (n, ref_s / best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
