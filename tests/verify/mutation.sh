#!/bin/sh
# Mutation testing of the verdict logic (accum/verdict.py: thresholds, z, detectable effects, judging, the claim and
# report verdicts, the standard-error ratio, the binomial summaries) against its unit tests, tests/verify/test_verdict.py.
# Not part of `make test`.  Run from the repository root:
#     .venv/bin/pip install cosmic-ray==8.7.0
#     sh tests/verify/mutation.sh [WORKDIR]          # default WORKDIR: /tmp/accum-mutation
# It copies the package to WORKDIR/tree as an install lays it out (so the mutants never touch the checkout, and
# PYTHONPATH puts the copy before the editable install), runs every mutant and prints cosmic-ray's report, whose
# last lines give the surviving mutants and the score.  Resumable: a second run with the same WORKDIR continues.
set -eu
ROOT=$(pwd)
WORK=${1:-/tmp/accum-mutation}
PY="$ROOT/.venv/bin/python"
mkdir -p "$WORK/tests"
if [ ! -f "$WORK/session.sqlite" ]; then
    rm -rf "$WORK/tree"
    "$PY" -c "import sys; sys.path.insert(0, 'tests'); from test_architecture import installed_copy; from pathlib import Path; installed_copy(Path(sys.argv[1]))" "$WORK/tree"
    cp tests/conftest.py tests/verify/test_verdict.py "$WORK/tests/"
    cat > "$WORK/cosmic-ray.toml" <<TOML
[cosmic-ray]
module-path = "tree/accum/verdict.py"
timeout = 120.0
excluded-modules = []
test-command = "env PYTHONPATH=tree OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $PY -m pytest -x -q -p no:cacheprovider -W error tests/test_verdict.py"

[cosmic-ray.distributor]
name = "local"

# bitwise, shift, floor-division and modulo replacements of float arithmetic raise TypeError (or change a float
# quantile beyond recognition) the first time the line runs: they measure line coverage only, which the kept
# operators measure too, and would double the run
[cosmic-ray.filters.operators-filter]
exclude-operators = ["core/ReplaceBinaryOperator_.*_(RShift|LShift|BitOr|BitAnd|BitXor|FloorDiv|Mod)$"]
TOML
    (cd "$WORK" && "$ROOT/.venv/bin/cosmic-ray" init cosmic-ray.toml session.sqlite \
        && "$ROOT/.venv/bin/cr-filter-operators" session.sqlite cosmic-ray.toml)
fi
cd "$WORK"
"$ROOT/.venv/bin/cosmic-ray" exec cosmic-ray.toml session.sqlite
"$ROOT/.venv/bin/cr-report" session.sqlite --show-pending | tail -n 400
