#!/usr/bin/env bash
# Runs the test case "mpi: a killed rank ends the job" (rank 1 kills itself in
# the middle of training) and checks that the job ends with a nonzero status
# within BOUND seconds and that mpirun's message names the rank.
# Usage: killed_rank.sh BOUND MPIRUN... TEST_BINARY
set -uo pipefail
bound="$1"
shift
start=$SECONDS
output="$(timeout "$((bound + 30))" "$@" --no-skip -tc='mpi: a killed rank ends the job' 2>&1)"
status=$?
elapsed=$((SECONDS - start))
echo "$output" | tail -n 15
echo "killed_rank: exit status $status after $elapsed s (bound $bound s)"
((status != 0)) || { echo "killed_rank: the job succeeded although rank 1 was killed" >&2; exit 1; }
((status != 124)) || { echo "killed_rank: the job was still running after $((bound + 30)) s" >&2; exit 1; }
((elapsed <= bound)) || { echo "killed_rank: the job took $elapsed s to end, past the $bound s bound" >&2; exit 1; }
grep -Eqi "rank 1|process rank 1|signal 9|killed" <<<"$output" ||
  { echo "killed_rank: mpirun's message does not name the killed rank" >&2; exit 1; }
