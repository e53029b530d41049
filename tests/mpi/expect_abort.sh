#!/usr/bin/env bash
# expect_abort.sh MAX_SECONDS REGEX COMMAND…: runs COMMAND and passes when it exits non-zero
# within MAX_SECONDS and its output (stdout + stderr) matches the extended REGEX. Used by the
# tests/mpi failure-path tests (an error on one rank aborts all; the watchdog aborts a hang).
set -uo pipefail
max_seconds=$1; regex=$2; shift 2
start=$(date +%s)
output=$(timeout --kill-after=5 "$((max_seconds + 30))" "$@" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$output" | tail -n 40
echo "expect_abort: exit code $rc after ${elapsed}s"
if [[ $rc -eq 0 ]]; then echo "expect_abort: FAIL: the command succeeded; expected an abort"; exit 1; fi
if (( elapsed > max_seconds )); then echo "expect_abort: FAIL: took ${elapsed}s > ${max_seconds}s"; exit 1; fi
if ! grep -Eq -- "$regex" <<<"$output"; then echo "expect_abort: FAIL: output does not match: $regex"; exit 1; fi
echo "expect_abort: PASS"
