#!/usr/bin/env bash
# The one mpirun command line Strata's tests and scripts use: `scripts/mpirun.sh -np 4 CMD ARGS…`.
# Open MPI refuses to run as root without --allow-run-as-root, and refuses more ranks than cores
# without --oversubscribe; oversubscribed ranks should yield the CPU while they wait
# (mpi_yield_when_idle) and stay unbound. Other MPIs (MPICH, Intel MPI) get the arguments as is.
# MPIRUN overrides the launcher (default: mpirun on PATH); STRATA_MPIRUN_FLAGS adds flags.
set -euo pipefail
launcher="${MPIRUN:-mpirun}"
flags=()
if "$launcher" --version 2>/dev/null | grep -q "Open MPI"; then
  flags+=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
  if [[ $(id -u) -eq 0 ]]; then flags+=(--allow-run-as-root); fi
fi
# shellcheck disable=SC2206
extra=(${STRATA_MPIRUN_FLAGS:-})
exec "$launcher" "${flags[@]}" "${extra[@]}" "$@"
