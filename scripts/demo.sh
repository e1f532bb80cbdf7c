#!/usr/bin/env bash
# Main job: set up, train the joint BPE and a tiny cT-LASER on the shared corpora for a few minutes, save it, then
# evaluate it next to the same architecture at random init.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${DEMO_OUTPUT:-runs/demo}
MINUTES=${DEMO_MINUTES:-8}
hf-tlaser train --model ctlaser --preset tiny --output-dir "$OUT" --max-minutes "$MINUTES" --max-steps 100000 \
    --bf16 --seed 1
hf-tlaser evaluate "$OUT" --suite retrieval sib200 --retrieval-sets ntrex128 --seeds 0 1 2 --projection tsne \
    | tee "$OUT/summary_trained.txt"
hf-tlaser evaluate "$OUT" --random-init --suite retrieval sib200 --retrieval-sets ntrex128 --seeds 0 1 2 \
    --projection none | tee "$OUT/summary_random_init.txt"
echo
echo "== $OUT (trained for $MINUTES minutes) =="; cat "$OUT/summary_trained.txt"
echo "== same architecture, random init =="; cat "$OUT/summary_random_init.txt"
echo "reports: $OUT/eval/report.md, $OUT/eval_random_init/report.md"
