#!/usr/bin/env bash
# The other direction of Megatron checkpoint interop: Strata trains each fixture case from its own
# initialisation on Megatron's recorded batches (steps 1-5), saving iteration 2 as torch_dist
# (checkpoint.ckpt_format=torch_dist) or, with FORMAT=torch, in Megatron's legacy format
# (checkpoint.ckpt_format=torch; FORMAT=all: both); Megatron-Core 0.19.2 then loads that checkpoint
# with its own load_checkpoint (make_fixtures.py --load-into-megatron; the legacy one with
# --no-load-rng, as Strata writes no RNG state) and trains steps 3-5 on the same batches. Each
# case runs with the variants its record.json has (legacy: torch, and torch_distopt for llama).
# Prints, per case and optimizer kind, Strata's and Megatron's losses and their largest relative
# difference; exits 1 when one exceeds 1e-6.
# Needs: a build with tests/strata_unit_tests (BUILD, default build_nocuda) and the venv of
# setup_venv.sh (.mcore-venv). Not run by CI (it needs torch and Megatron-Core).
# Usage: [FORMAT=torch_dist|torch|all] bash scripts/megatron/checkpoint_fixtures/check_strata_into_megatron.sh [case ...]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../../.." && pwd)
build=${BUILD:-$repo/build_nocuda}
py=${MCORE_PYTHON:-$repo/.mcore-venv/bin/python}
cases=("$@")
case ${FORMAT:-torch_dist} in
  torch_dist) variants=(torch_dist torch_dist_distopt) ;;
  torch) variants=(torch torch_distopt) ;;
  all) variants=(torch_dist torch_dist_distopt torch torch_distopt) ;;
  *) echo "FORMAT must be torch_dist, torch or all" >&2; exit 2 ;;
esac
[ ${#cases[@]} -eq 0 ] && cases=(llama gpt2 moe mtp)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for c in "${cases[@]}"; do
  for variant in "${variants[@]}"; do
    "$py" -c 'import json,sys; sys.exit(sys.argv[2] not in json.load(open(sys.argv[1]))["megatron_argv"])' \
      "$repo/tests/fixtures/megatron_ckpt/$c/record.json" "$variant" || continue
    out=$work/$c-$variant
    strata=$(STRATA_MEGATRON_CASE=$c STRATA_MEGATRON_VARIANT=$variant STRATA_MEGATRON_EXPORT_DIR=$out \
               "$build/tests/strata_unit_tests" "[.megatron_export]" 2>/dev/null | grep '^{"strata_continued"')
    # Megatron loads the iteration-2 checkpoint (the later saves are not its subject).
    find "$out" -maxdepth 1 -name 'iter_*' ! -name iter_0000002 -exec rm -rf {} +
    printf 2 > "$out/latest_checkpointed_iteration.txt"
    dist=no; [ "${variant%_distopt}" != "$variant" ] && dist=yes
    format=torch_dist; extra=""
    [ "${variant#torch_dist}" = "$variant" ] && format=torch extra=--no-load-rng
    megatron=$("$py" "$repo/scripts/megatron/checkpoint_fixtures/make_fixtures.py" --load-into-megatron "$out" \
                 --case "$c" --format $format --distributed-optimizer $dist --megatron-args="$extra" 2>/dev/null)
    "$py" - "$c" "$variant" "$strata" "$megatron" <<'PY' || status=1
import json, sys
case, variant, strata, megatron = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
s = strata["strata_continued"]
m = [c["losses"]["lm loss"] for c in megatron["continued"]]
worst = max(abs(a - b) / abs(b) for a, b in zip(s, m))
print(f"{case:6s} {variant:19s} strata {['%.7f' % x for x in s]} megatron {['%.7f' % x for x in m]} max rel diff {worst:.2e}")
sys.exit(0 if worst <= 1e-6 else 1)
PY
  done
done
exit $status
