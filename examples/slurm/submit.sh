#!/bin/bash
# Submit a corral job file as a Slurm job array of SHARDS tasks and a merge
# job that runs when all of them succeeded.
#
#   JOBS=/shared/jobs.jsonl RESULTS=/shared/results SHARDS=4 ./submit.sh
#
# Prints "<array job id> <merge job id>". CORRAL names the corral binary
# (default: corral on the nodes' PATH); CORRAL_BATCH_OPTS adds batch options.
set -euo pipefail

: "${JOBS:?set JOBS to the job file, on storage every node sees}"
: "${RESULTS:?set RESULTS to a directory every node sees}"
SHARDS=${SHARDS:-4}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$RESULTS"
export JOBS RESULTS SHARDS
array=$(sbatch --parsable --array=0-$((SHARDS - 1)) --export=ALL "$here/shard.sbatch")
array=${array%%;*}
merge=$(sbatch --parsable --dependency=afterok:"$array" --export=ALL "$here/merge.sbatch")
merge=${merge%%;*}
echo "$array $merge"
