#!/usr/bin/env bash
# Main job: set up, train the joint BPE and a tiny cT-LASER on the shared corpora for a fixed number of updates, save
# it, then evaluate it in one table next to the same architecture at random init and the character TF-IDF baseline.
#   DEMO_UPDATES  optimizer updates (default 800: about 10 minutes on an idle 2-core CPU with native bf16)
#   DEMO_OUTPUT   run folder (default runs/demo; if it already holds a run, runs/demo-2, -3, ... is used instead)
#   DEMO_PRECISION  auto (default) | fp32 | bf16 | fp16
#   DEMO_REFERENCE  a real tool's row in the table (default: the shared multilingual-e5-small; its vectors are
#                   cached under ~/.cache/hf_tlaser/teachers, so only the first run pays for them); none: no row
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
UPDATES=${DEMO_UPDATES:-800}
OUT=${DEMO_OUTPUT:-runs/demo}
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
    base=$OUT; n=2
    while [ -e "$base-$n" ]; do n=$((n + 1)); done
    OUT="$base-$n"
    echo "$base already holds a run (kept as it is); this one goes to $OUT"
fi
DATA=${HF_TLASER_DATA:-../shared/data}
REFERENCE=${DEMO_REFERENCE:-$DATA/multilingual-e5-small}
REFERENCE_ARGS=()
[ "$REFERENCE" = none ] || REFERENCE_ARGS=(--reference "$REFERENCE")
hf-tlaser env
# --max-minutes is only a safety stop on a very slow or overloaded machine; the run is defined by its update count
hf-tlaser train --model ctlaser --preset tiny --output-dir "$OUT" --max-steps "$UPDATES" --max-minutes 90 \
    --precision "${DEMO_PRECISION:-auto}" --seed 1
hf-tlaser evaluate "$OUT" --suite retrieval sib200 --retrieval-sets ntrex128 --seeds 0 1 2 --projection tsne \
    "${REFERENCE_ARGS[@]}" \
    | tee "$OUT/summary.txt"
echo
echo "== $OUT: tiny cT-LASER after $UPDATES updates, random init, the lexical baseline and ${REFERENCE##*/} =="
cat "$OUT/summary.txt"
echo "report: $OUT/eval/report.md"
