#!/usr/bin/env bash
# Builds the small real-text corpus that configs/gpt_tiny.yaml trains on, from texts present on
# every Debian machine: /usr/share/common-licenses/* and, if installed, /usr/share/doc/*/copyright,
# concatenated (symlinked duplicates skipped) and capped at CORPUS_MAX_BYTES (default 4 MB). Then
# `strata preprocess` tokenizes it byte-level, one document per paragraph with EOD appended, into
#   out/corpus/licenses_text_document.{bin,idx}        (data.data_path of configs/gpt_tiny.yaml)
# With CORPUS_BPE=1 it also writes out/corpus/licenses_bpe_text_document.{bin,idx} with the tiny
# GPT-2 BPE vocabulary of tests/data/gpt2_tiny (457 tokens; a test vocabulary, not GPT-2's).
#   scripts/prepare_corpus.sh [STRATA_BINARY]   (default: $BUILD_DIR/strata, BUILD_DIR=build)
# Paths are relative to the repository root, where `strata train` is run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
strata="${1:-${BUILD_DIR:-$root/build}/strata}"
max_bytes="${CORPUS_MAX_BYTES:-4000000}"
cd "$root"
[[ -x "$strata" ]] || { echo "prepare_corpus.sh: no strata binary at $strata (build first: scripts/build.sh)" >&2; exit 1; }

out=out/corpus
mkdir -p "$out"
text="$out/licenses.txt"
: > "$text"
bytes=0
shopt -s nullglob
for f in /usr/share/common-licenses/* /usr/share/doc/*/copyright; do
  [[ -f "$f" && ! -L "$f" ]] || continue           # regular files only: GPL → GPL-3 etc. once
  size=$(stat -c %s "$f")
  (( bytes + size + 2 <= max_bytes )) || continue
  cat "$f" >> "$text"
  printf '\n\n' >> "$text"
  bytes=$((bytes + size + 2))
done
(( bytes > 0 )) || { echo "prepare_corpus.sh: found no license texts under /usr/share" >&2; exit 1; }
echo "prepare_corpus.sh: $text: $bytes bytes"

"$strata" preprocess --input "$text" --output-prefix "$out/licenses" \
  --tokenizer-type ByteLevelTokenizer --split-paragraphs --append-eod

if [[ "${CORPUS_BPE:-0}" == 1 ]]; then
  "$strata" preprocess --input "$text" --output-prefix "$out/licenses_bpe" \
    --tokenizer-type GPT2BPETokenizer \
    --vocab-file tests/data/gpt2_tiny/vocab.json --merge-file tests/data/gpt2_tiny/merges.txt \
    --split-paragraphs --append-eod
fi
