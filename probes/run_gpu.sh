#!/bin/sh
# The C7 GPU preset: its arms x 3 seeds, L_train 512 tokens, 6 layers of width 384, evaluation to 128x (65,536 tokens).
# Usage: sh probes/run_gpu.sh [extra `accum probe sweep` options, which override the preset]
# Environment: ACCUM (command, default .venv/bin/accum), DEVICE (default cuda), SWEEP_DIR (default
# probes/results/gpu), THREADS (CPU threads, default 4), TIME_BOX_S (default none: if set, the sweep gets
# SIGINT after that many seconds and keeps its finished runs; SIGKILL KILL_AFTER_S, default 15, later if it
# has not stopped).  Then `accum probe report` of what is there (REPORT=0: not).  Resumable: rerun the same command to finish
# an interrupted sweep.  Exit status: the sweep's (124: the time box stopped it, 137: it had to be killed).
set -eu
ACCUM=${ACCUM:-.venv/bin/accum}
SWEEP_DIR=${SWEEP_DIR:-probes/results/gpu}
BOX=""
if [ -n "${TIME_BOX_S:-}" ]; then
    BOX="timeout -s INT -k ${KILL_AFTER_S:-15} $TIME_BOX_S"
fi
status=0
# shellcheck disable=SC2086  # ACCUM may be a command with arguments (python -m accum.cli); BOX is a prefix
$BOX $ACCUM probe sweep --preset gpu --device "${DEVICE:-cuda}" --out "$SWEEP_DIR" \
    --threads "${THREADS:-4}" --no-progress "$@" || status=$?
if [ "$status" -eq 124 ]; then
    echo "run_gpu.sh: the time box of $TIME_BOX_S s stopped the sweep; its finished runs are kept in $SWEEP_DIR" >&2
fi
if [ "${REPORT:-1}" != 0 ] && [ -f "$SWEEP_DIR/sweep.json" ]; then
    report=0
    # shellcheck disable=SC2086
    $ACCUM probe report --sweep "$SWEEP_DIR/sweep.json" || report=$?
    [ "$status" -ne 0 ] || status=$report
fi
exit "$status"
