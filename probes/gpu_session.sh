#!/usr/bin/env bash
# The C7 GPU session: what one call of the device tool runs on a machine with a GPU (README, "The GPU session").
#
# Prepared here by `make gpu-bundle` (the accum wheel and the data cache in .gpu-bundle/, carried to the
# machine, whose own Python has torch but no dask and no network).  There, in the repository root:
#   1. installs the wheel into $WORK/site (pip --no-index --no-deps --target) and puts it on PYTHONPATH;
#   2. records the versions and the device (env-STAMP.json), stops if torch sees no GPU;
#   3. runs the GPU benchmark first (gpu_bench-STAMP.json; 64 x 2^24 = 1.07e9 far tokens at d = 64);
#   4. runs the GPU preset sweep (probes/run_gpu.sh) in a time box: SIGINT before the deadline, so every
#      finished run is kept and only the run in flight is lost; then prints every run's seconds;
#   5. packs every JSON, sweep.md and this log into ONE archive, $OUT/$ARCHIVE (also after step 3, so an
#      early stop still returns the benchmark).  `make gpu-results ARCHIVE=...` unpacks it here.
#
# Every knob is an environment variable (defaults sized for one H200 call of at most 8 minutes):
#   OUT (required: the folder whose files come back)    ARCHIVE (gpu_session.tar.gz)
#   PYTHON (python3)   BUNDLE (.gpu-bundle)   DATA_DIR ($BUNDLE/data)   WORK (/tmp/accum-gpu-session, emptied)
#   DEVICE (cuda)   THREADS (4: CPU threads per process)
#   DEADLINE_S (450: every step ends by then, packing included)   PACK_RESERVE_S (45: kept for the report and
#   the packing; the time boxes end that long before the deadline)   KILL_AFTER_S (15: SIGKILL that long after
#   a box's SIGINT if a step has not stopped; finished runs are kept even then)
#   BENCH_BOX_S (120; 0 skips the benchmark)   BENCH_DIM (64)   BENCH_FAR (16777216)   BENCH_SAMPLES (64)
#   BENCH_CHUNK (65536)
#   ARMS, SEEDS (default: the gpu preset's design; runs go seed by seed, every arm at the first seed first)
#   SWEEP_BOX_S (default: what the deadline leaves)   SWEEP_ARGS (more `accum probe sweep` options, e.g. tiny
#   sizes; they override the gpu preset)   RESUME_FROM (probes/results/gpu: the finished runs committed there
#   are reused, not rerun; empty to start afresh)
set -u -o pipefail

OUT=${OUT:?OUT must name the folder whose files come back}
ARCHIVE=${ARCHIVE:-gpu_session.tar.gz}
PYTHON=${PYTHON:-python3}
BUNDLE=${BUNDLE:-.gpu-bundle}
DATA_DIR=${DATA_DIR:-$BUNDLE/data}
WORK=${WORK:-/tmp/accum-gpu-session}
DEVICE=${DEVICE:-cuda}
THREADS=${THREADS:-4}
DEADLINE_S=${DEADLINE_S:-450}
PACK_RESERVE_S=${PACK_RESERVE_S:-45}
KILL_AFTER_S=${KILL_AFTER_S:-15}
BENCH_BOX_S=${BENCH_BOX_S:-120}
BENCH_DIM=${BENCH_DIM:-64}
BENCH_FAR=${BENCH_FAR:-16777216}
BENCH_SAMPLES=${BENCH_SAMPLES:-64}
BENCH_CHUNK=${BENCH_CHUNK:-65536}
ARMS=${ARMS:-}
SEEDS=${SEEDS:-}
SWEEP_BOX_S=${SWEEP_BOX_S:-}
SWEEP_ARGS=${SWEEP_ARGS:-}
RESUME_FROM=${RESUME_FROM-probes/results/gpu}

HERE=$(cd "$(dirname "$0")" && pwd)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=$WORK/results   # the sweep's --out; packed as it is, so it unpacks as probes/results/gpu/
SITE=$WORK/site
LOG=$RESULTS/session-$STAMP.log
# PYTHONSAFEPATH: `python -m` must not put the repository root first on sys.path, where accum/ (without its
# subpackages, which the wheel maps from simulations/, probes/, ...) would shadow the installed wheel
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
FAILED=0

rm -rf "$WORK" && mkdir -p "$RESULTS" "$OUT" "$WORK/data" || exit 1
# a copy: the texts extracted from the sdist land there, not in the carried bundle (which may be read-only)
if [ -d "$DATA_DIR" ]; then
    cp -R "$DATA_DIR"/. "$WORK/data"/ || exit 1
fi
if [ -n "$RESUME_FROM" ] && [ -f "$RESUME_FROM/sweep.json" ]; then
    cp -R "$RESUME_FROM"/. "$RESULTS"/
fi

say() { printf '[%4d s] %s\n' "$SECONDS" "$*" | tee -a "$LOG"; }
logged() { "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }
left() { echo $((DEADLINE_S - PACK_RESERVE_S - SECONDS)); }
smaller() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
step_status() {  # step_status NAME STATUS: log how a step ended; 124 (its box) is no failure
    case "$2" in
        0) say "$1: done" ;;
        124) say "$1: stopped by its time box (SIGINT); what it finished is kept" ;;
        *) say "$1: FAILED with status $2"; FAILED=$2 ;;
    esac
}
pack() {  # every JSON, .md and .log of the results folder into $OUT/$ARCHIVE, atomically
    (cd "$RESULTS" && find . -type f \( -name '*.json' -o -name '*.md' -o -name '*.log' \) | LC_ALL=C sort |
        tar -czf "$OUT/$ARCHIVE.part" -T -) && mv -f "$OUT/$ARCHIVE.part" "$OUT/$ARCHIVE"
}
finish() { say "packing $OUT/$ARCHIVE (exit status $1)"; pack; exit "$1"; }

say "GPU session $STAMP: device $DEVICE, deadline ${DEADLINE_S} s, arms [${ARMS:-the preset's}], seeds [${SEEDS:-the preset's}]"
say "== install"
wheels=("$BUNDLE"/accum-*.whl)
if [ "${#wheels[@]}" -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
    say "need exactly one accum wheel in $BUNDLE (run \`make gpu-bundle\` and carry $BUNDLE), found: ${wheels[*]}"
    finish 1
fi
logged "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "${wheels[0]}" || finish 1
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
ACCUM="$PYTHON -m accum.cli"

say "== versions and device"
logged "$PYTHON" -m accum.probes.gpu_session env --device "$DEVICE" --json "$RESULTS/env-$STAMP.json" || finish 1

if [ "$BENCH_BOX_S" -gt 0 ]; then
    box=$(smaller "$BENCH_BOX_S" "$(left)")
    say "== GPU benchmark: d = $BENCH_DIM, $BENCH_SAMPLES x $BENCH_FAR far tokens, box ${box} s"
    status=0
    logged timeout -s INT -k "$KILL_AFTER_S" "$box" "$PYTHON" -m accum.simulations.gpu_bench --device "$DEVICE" \
        --dim "$BENCH_DIM" --far "$BENCH_FAR" --samples "$BENCH_SAMPLES" --chunk "$BENCH_CHUNK" \
        --json "$RESULTS/gpu_bench-$STAMP.json" || status=$?
    step_status "benchmark" "$status"
    pack
fi

design=()
[ -n "$ARMS" ] && read -r -a arms <<<"$ARMS" && design+=(--arms "${arms[@]}")
[ -n "$SEEDS" ] && read -r -a seeds <<<"$SEEDS" && design+=(--seeds "${seeds[@]}")
read -r -a extra <<<"$SWEEP_ARGS"
sweep() {  # sweep BOX REPORT [options]: probes/run_gpu.sh (the gpu preset, then its report if REPORT is 1)
    local box=$1 report=$2
    shift 2
    logged env ACCUM="$ACCUM" DEVICE="$DEVICE" SWEEP_DIR="$RESULTS" THREADS="$THREADS" TIME_BOX_S="$box" \
        KILL_AFTER_S="$KILL_AFTER_S" REPORT="$report" sh "$HERE/run_gpu.sh" --data-dir "$WORK/data" "${design[@]}" \
        "${extra[@]}" "$@"
}
run_times() { logged "$PYTHON" -m accum.probes.gpu_session times --sweep "$RESULTS/sweep.json" "$@"; }

box=$(left)
[ -n "$SWEEP_BOX_S" ] && box=$(smaller "$SWEEP_BOX_S" "$box")
if [ "$box" -le 0 ]; then
    say "no time left for the sweep"
    finish "$FAILED"
fi
say "== GPU preset sweep, box ${box} s"
status=0
start=$SECONDS
sweep "$box" 1 || status=$?
step_status "sweep ($((SECONDS - start)) s)" "$status"
[ -f "$RESULTS/sweep.json" ] && run_times
finish "$FAILED"
