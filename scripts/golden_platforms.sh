#!/usr/bin/env bash
# Golden cases across CPU platforms (docs/reproducibility.md): optionally regenerates every case's
# golden file on this machine, then runs every case with each given OpenBLAS core type (and the
# baseline ISA path) and prints, per case, how far the run drifted from the golden values: the
# largest relative difference of each loss and the largest absolute num-zeros difference. These
# are the numbers behind golden::cross_platform_tolerance.
#   scripts/golden_platforms.sh [--build DIR] [--regenerate] [--isa ISA] CORETYPE…   (e.g. Haswell Sandybridge)
# A core type of "host" leaves OPENBLAS_CORETYPE unset. Logs go to <build>/golden_platforms/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
regenerate=0
isa=baseline
cores=()
while (($#)); do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --regenerate) regenerate=1; shift ;;
    --isa) isa="$2"; shift 2 ;;
    *) cores+=("$1"); shift ;;
  esac
done
logs="$build/golden_platforms"
mkdir -p "$logs"

# The ranks a case needs: parallel.world_size, else the product of the model-parallel sizes.
case_ranks() {
  local cfg="$1/model_config.yaml" ranks=1 world
  world="$(sed -n 's/^ \+world_size: *\([0-9]\+\).*/\1/p' "$cfg")"
  if [[ -n "$world" ]]; then echo "$world"; return; fi
  for n in $(sed -n 's/^ \+\(tensor_model_parallel_size\|pipeline_model_parallel_size\|context_parallel_size\): *\([0-9]\+\).*/\2/p' "$cfg"); do
    ranks=$((ranks * n))
  done
  echo "$ranks"
}

golden() {  # golden <run|regenerate> <case dir> [flags…]
  local verb="$1" dir="$2" ranks
  shift 2
  ranks="$(case_ranks "$dir")"
  local work="$logs/work/$(basename "$dir")"
  if ((ranks > 1)); then
    "$root/scripts/mpirun.sh" -np "$ranks" "$build/strata" golden "$verb" "$dir" --work-dir "$work" "$@"
  else
    "$build/strata" golden "$verb" "$dir" --work-dir "$work" "$@"
  fi
}

mapfile -t cases < <(find "$root/tests/functional" -name model_config.yaml -printf '%h\n' | sort)
export OMP_NUM_THREADS=1
if ((regenerate)); then
  for dir in "${cases[@]}"; do
    echo "regenerate $(basename "$dir")"
    golden regenerate "$dir" --drop-other-platforms > "$logs/regenerate_$(basename "$dir").log" 2>&1 ||
      { tail -30 "$logs/regenerate_$(basename "$dir").log"; exit 1; }
  done
fi
printf '%-10s %-52s %-6s %s\n' core case result "drift (max rel for losses, max |diff| for num-zeros)"
for core in "${cores[@]}"; do
  for dir in "${cases[@]}"; do
    name="$(basename "$dir")"
    log="$logs/${core}_${name}.log"
    rc=0
    (
      if [[ "$core" == host ]]; then unset OPENBLAS_CORETYPE; else export OPENBLAS_CORETYPE="$core"; fi
      export STRATA_CPU_ISA="$isa"
      golden run "$dir"
    ) > "$log" 2>&1 || rc=$?
    drift="$(grep -E '^  (PASS|FAIL) .*(cross-platform|deterministic)' "$log" |
      sed -E 's/^  (PASS|FAIL) +(.*[a-z_0-9]) +(cross-platform|deterministic).*max \|diff\| ([^,]+), max rel ([^ ]+).*/\2: \4 \5/' |
      awk -F': ' '{split($2, d, " "); if ($1 == "num-zeros") printf "%s %s; ", $1, d[1]; else printf "%s %s; ", $1, d[2]}')"
    printf '%-10s %-52s %-6s %s\n' "$core" "$name" "$([[ $rc == 0 ]] && echo pass || echo FAIL)" "$drift"
  done
done
