#!/usr/bin/env python3
"""How much of a generated sample is words of the training corpus: the share of the sample's
words (runs of three letters or more, lower-cased, the prompt's excluded) that occur as words in
the corpus (shorter runs are words by chance too often to tell anything).
scripts/run.sh prints it for the samples before and after training, so "the sample reads as text"
is a number as well as an impression.

Usage: word_share.py CORPUS_TEXT PROMPT < SAMPLE   (prints one line)
"""
import re
import sys


def words(text):
    return re.findall(r"[a-z]{3,}", text.lower())


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: word_share.py CORPUS_TEXT PROMPT < SAMPLE")
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        vocabulary = set(words(f.read()))
    sample = sys.stdin.read()
    prompt = sys.argv[2]
    if sample.startswith(prompt):
        sample = sample[len(prompt):]
    generated = words(sample)
    known = sum(1 for w in generated if w in vocabulary)
    share = 100.0 * known / len(generated) if generated else 0.0
    print(f"{share:.0f}% of the sample's {len(generated)} words (3+ letters) are words of the corpus")


if __name__ == "__main__":
    main()
