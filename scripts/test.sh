#!/usr/bin/env bash
# Set up (see setup.sh) and run the test suite: one pytest-xdist worker per CPU this process may use, each on one
# thread (tests/conftest.py), so that no OpenMP thread waits for another job's core.
#   HF_TLASER_TEST_WORKERS=N  N workers instead (0: one process, two threads, as before)
#   extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python}
WORKERS=${HF_TLASER_TEST_WORKERS:-$("$PY" -c 'from hf_tlaser.hardware import available_cpus; print(available_cpus())')}
if [ "$WORKERS" -le 1 ]; then
    WORKERS=0
fi
"$PY" -m pytest -q -n "$WORKERS" tests "$@"
