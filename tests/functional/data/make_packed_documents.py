#!/usr/bin/env python3
"""Writes the short documents of the packed-sequence golden case (tests/functional/gpt/
gpt_packed_reset_rope_gqa): 600 synthetic sentences of 2 to 12 words, so that a 64-token sample
holds several documents. Deterministic (its own LCG, no library RNG). Tokenize the output with
  strata preprocess --input packed_documents.jsonl --output-prefix packed_documents \
      --tokenizer-type ByteLevelTokenizer --append-eod
"""
import json
import sys

WORDS = ("the a model token layer loss step data rank sequence document attention state router "
         "expert norm gradient batch stream learns packs reads trains keeps sees ends starts").split()


def main(path):
    x = 12345
    with open(path, "w") as f:
        for _ in range(600):
            x = (1103515245 * x + 12345) % 2**31
            n = 2 + x % 11
            words = []
            for _ in range(n):
                x = (1103515245 * x + 12345) % 2**31
                words.append(WORDS[x % len(WORDS)])
            f.write(json.dumps({"text": " ".join(words).capitalize() + "."}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "packed_documents.jsonl")
