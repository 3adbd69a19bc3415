#!/bin/sh
# The C7 GPU preset: every arm x 3 seeds, L_train 512 tokens, 6 layers of width 384, evaluation to 64x.
# Usage: sh probes/run_gpu.sh [extra `accum probe sweep` options, which override the preset]
# Environment: ACCUM (command, default .venv/bin/accum), DEVICE (default cuda), OUT (default probes/results/gpu),
# THREADS (CPU threads, default 4).  Resumable: rerun the same command to finish an interrupted sweep.
set -eu
ACCUM=${ACCUM:-.venv/bin/accum}
# shellcheck disable=SC2086  # ACCUM may be a command with arguments (python -m accum.cli)
$ACCUM probe sweep --preset gpu --device "${DEVICE:-cuda}" --out "${OUT:-probes/results/gpu}" \
    --threads "${THREADS:-4}" --no-progress "$@"
$ACCUM probe report --sweep "${OUT:-probes/results/gpu}/sweep.json"
