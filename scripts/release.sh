#!/usr/bin/env bash
# The release recipe (scripts/release.py): set up the tested stack, then train, evaluate and write the model card of
# the release model into ${RELEASE_OUTPUT:-runs/release}; arguments go to scripts/release.py. Started again after an
# interruption, it continues from the last checkpoint. Publish with: hf-tlaser push runs/release ORG/NAME
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
hf-tlaser env
python scripts/release.py --output "${RELEASE_OUTPUT:-runs/release}" "$@"
