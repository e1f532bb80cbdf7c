#!/usr/bin/env bash
# Install hf_tlaser and its dependencies on a fresh machine: the CPU torch wheel first (pinned, so pip never pulls
# CUDA packages), then the package with its dev extras.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
