#!/usr/bin/env bash
# Coverage-guided fuzzing of Strata's parsers with libFuzzer (docs/fuzzing.md; issue 42).
#   scripts/fuzz.sh PARSER [SECONDS] [-- LIBFUZZER_FLAGS...]   one campaign (default 3600 s)
#   scripts/fuzz.sh --all --seconds N                           every harness for N s each (CI)
#   scripts/fuzz.sh --list                                      the harnesses
#   scripts/fuzz.sh --build-only (PARSER | --all)               build, run nothing
#   --no-build (with a run): use the harnesses as built
# The harnesses are the lines of tests/fuzz/harnesses.txt (python ones run by .pyenv's Python, or
# STRATA_FUZZ_PYTHON, with atheris; they need no build). Builds what is missing in the fuzz build
# directory (STRATA_FUZZ_BUILD, default build-fuzz/: clang, STRATA_FUZZ=ON, CPU only, -O1 -g;
# BUILD_JOBS, default nproc), then fuzzes from the committed corpus tests/fuzz/corpus/PARSER/ (run
# first, whole: a regression input that fails again fails the run) with the dictionary
# tests/fuzz/dict/PARSER.dict and the harness's limits (tests/fuzz/fuzz_contract.h). New inputs go
# to BUILD/fuzz/corpus/PARSER/, findings (crash-*, timeout-*, oom-*, leak-*, slow-unit-*) to
# BUILD/fuzz/findings/PARSER/; the committed corpus is never written. Exit status: 0 when no
# harness found anything. Last line per harness: executions, executions/s, edges (cov), corpus size.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${STRATA_FUZZ_BUILD:-$root/build-fuzz}"
table="$root/tests/fuzz/harnesses.txt"
harnesses() { grep -E '^[a-z]' "$table" | awk '{print $1}'; }
library_of() { awk -v n="$1" '$1 == n {print $2}' "$table"; }
python="${STRATA_FUZZ_PYTHON:-$root/.pyenv/bin/python}"  # the python harnesses' (atheris, scripts/setup.sh)

usage() { sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# //'; exit 2; }
all=0; seconds=""; parser=""; extra=(); build_only=0; no_build=0
while (($#)); do
  case "$1" in
    --all) all=1 ;;
    --seconds) seconds="$2"; shift ;;
    --list) harnesses; exit 0 ;;
    --build-only) build_only=1 ;;
    --no-build) no_build=1 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage ;;
    *) if [[ -z "$parser" ]]; then parser="$1"; elif [[ -z "$seconds" ]]; then seconds="$1"; else usage; fi ;;
  esac
  shift
done
if ((all)); then
  [[ -n "$seconds" ]] || ((build_only)) || { echo "fuzz.sh: --all needs --seconds N" >&2; exit 2; }
  names=($(harnesses))
else
  [[ -n "$parser" ]] || usage
  harnesses | grep -qx "$parser" || { echo "fuzz.sh: no harness '$parser'; harnesses: $(harnesses | tr '\n' ' ')" >&2; exit 2; }
  names=("$parser"); seconds="${seconds:-3600}"
fi

# Build (configure once; ninja rebuilds only what changed).
if ((!no_build)); then
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF -DSTRATA_MPI=OFF -DBUILD_TESTING=OFF \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" > "$build.cmake.log" 2>&1 || {
      cat "$build.cmake.log"; exit 1; }
fi
targets=()
for name in "${names[@]}"; do [[ "$(library_of "$name")" == python ]] || targets+=("fuzz_$name"); done
start=$(date +%s)
if ((${#targets[@]})); then cmake --build "$build" -j "${BUILD_JOBS:-$(nproc)}" --target "${targets[@]}"; fi
echo "fuzz: build took $(( $(date +%s) - start )) s"
fi
((build_only)) && exit 0

rc=0
for name in "${names[@]}"; do
  work="$build/fuzz/corpus/$name" findings="$build/fuzz/findings/$name"
  mkdir -p "$work" "$findings"
  log="$build/fuzz/$name.log"
  start=$(date +%s)
  set +e
  harness=("$build/tests/fuzz/fuzz_$name")
  [[ "$(library_of "$name")" == python ]] && harness=("$python" "$root/tests/fuzz/fuzz_$name.py")
  "${harness[@]}" "$work" "$root/tests/fuzz/corpus/$name" -max_total_time="$seconds" \
    -artifact_prefix="$findings/" -print_final_stats=1 "${extra[@]}" > "$log" 2>&1
  status=$?
  set -e
  runs=$(grep -aoP 'stat::number_of_executed_units:\s*\K[0-9]+' "$log" || echo 0)
  speed=$(grep -aoP 'stat::average_exec_per_sec:\s*\K[0-9]+' "$log" || echo 0)
  cov=$(grep -aoP '^#[0-9]+.*\bcov: \K[0-9]+' "$log" | tail -1)
  corpus=$(grep -aoP '^#[0-9]+.*\bcorp: \K[0-9]+' "$log" | tail -1)
  if ((status != 0)); then
    rc=1
    echo "fuzz $name: FINDING (exit $status) after $(( $(date +%s) - start )) s; the log: $log; the input:" \
      "$(ls -t "$findings" | head -1 | sed "s|^|$findings/|")"
    grep -E "^==[0-9]+==ERROR|^==fuzz contract|runtime error|^SUMMARY|Timeout|out-of-memory|malloc\(" "$log" | head -5 || true
  else
    echo "fuzz $name: ${runs} runs in $(( $(date +%s) - start )) s (${speed}/s), cov ${cov:-?} edges, corpus ${corpus:-?} inputs, no finding"
  fi
done
exit $rc
