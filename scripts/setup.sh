#!/usr/bin/env bash
# Install hf_tlaser with the TESTED stack on a fresh machine: torch first (pinned, so pip never pulls CUDA packages on
# a CPU machine), then the package with its dev extras, every dependency held at its version in constraints.txt (the
# versions the test suite last passed with). pyproject.toml keeps compatible ranges for installs into your own
# environment; `python scripts/check_newest.py` tries the newest releases and `--write-constraints` refreshes the pins.
#   HF_TLASER_KEEP_TORCH=1  keep an installed torch whose version differs from the pin (an untested stack)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
CONSTRAINTS=constraints.txt
LOG=$(mktemp "${TMPDIR:-/tmp}/hf_tlaser-setup.XXXXXX")

fail() {  # one line that says what to do, exit code 2
    echo "setup: $*" >&2
    exit 2
}

command -v "$PY" >/dev/null 2>&1 || fail "no '$PY' on PATH; install Python 3.11 (3.11-3.13 supported) or set PYTHON=/path/to/python"
# the pinned stack needs >= 3.11 (numpy 2.4); torch 2.13 has no wheels past 3.13
read -r PY_VERSION PY_OK < <("$PY" -c 'import sys; v = sys.version_info; print(f"{v[0]}.{v[1]}", int((3, 11) <= v[:2] <= (3, 13)))')
[ "$PY_OK" = 1 ] || fail "Python $PY_VERSION is outside the supported range 3.11-3.13 for the pinned stack; create a venv with one of those (e.g. python3.11 -m venv .venv && . .venv/bin/activate) and run this again"

TORCH_PIN=$(sed -n 's/^torch==\([^ ;]*\).*/\1/p' "$CONSTRAINTS")
[ -n "$TORCH_PIN" ] || fail "$CONSTRAINTS has no torch== line; restore it with git checkout $CONSTRAINTS"
INSTALLED_TORCH=$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
if [ -n "$INSTALLED_TORCH" ] && [ "${INSTALLED_TORCH%%+*}" != "$TORCH_PIN" ] && [ "${HF_TLASER_KEEP_TORCH:-0}" != 1 ]; then
    fail "torch $INSTALLED_TORCH is installed but the tested stack pins torch $TORCH_PIN; use a fresh venv, or install the pin (pip install torch==$TORCH_PIN), or keep yours untested with HF_TLASER_KEEP_TORCH=1"
fi

pip_install() {  # quiet pip; on failure one line naming the package pip could not get, the full output in $LOG
    if ! "$PY" -m pip install --disable-pip-version-check "$@" >"$LOG" 2>&1; then
        missing=$(grep -oE "(No matching distribution found for|Could not find a version that satisfies the requirement|The user requested \(constraint\)) [^ ]+" "$LOG" | head -1 | awk '{print $NF}' || true)
        if [ -n "$missing" ]; then
            fail "pip could not get $missing for Python $PY_VERSION (no reachable wheel or index); check the network or index settings (pip config list); the pins were tested on Python 3.11; pip's output: $LOG"
        fi
        fail "pip install $* failed: $(grep -E 'ERROR' "$LOG" | tail -1 | cut -c1-200 || true); pip's output: $LOG"
    fi
}

if [ -z "$INSTALLED_TORCH" ]; then
    pip_install "torch==$TORCH_PIN"
fi
if [ -n "$INSTALLED_TORCH" ] && [ "${INSTALLED_TORCH%%+*}" != "$TORCH_PIN" ]; then
    # HF_TLASER_KEEP_TORCH=1: every other pin holds, torch stays as it is
    pip_install -c <(grep -v '^torch==' "$CONSTRAINTS") -e ".[dev]"
else
    pip_install -c "$CONSTRAINTS" -e ".[dev]"
fi
rm -f "$LOG"
