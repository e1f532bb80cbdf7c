#!/usr/bin/env bash
# One GPU lease, run-ready: the paper's speed claims, the distributed configs and a `small` cT-LASER trained for
# real, with results, plots and logs written into $OUT as at most 8 flat files.
#
#   scripts/gpu_session.sh [--size tiny|full] [--out DIR] [--stage STAGES] [--train-minutes M] [--wait-minutes M]
#                          [--save-steps N] [--deadline-minutes M]
#   scripts/gpu_session.sh --prepare           # HERE, before the lease: --fetch-wheels + --pack-data + sizes
#   scripts/gpu_session.sh --fetch-wheels [DIR] # HERE: the GPU machine's wheels of constraints.txt (default .gpu_carry/wheels)
#   scripts/gpu_session.sh --pack-data [DIR]    # HERE: the corpora the session reads, one .tar.xz (default .gpu_carry/data)
#   scripts/gpu_session.sh --prepare-release     # HERE: wheels + corpora + the start, in parts for 3 calls (below)
#
# --size full (default): CUDA, bf16 where torch.cuda.is_bf16_supported(), the real sizes. --size tiny: the WHOLE
# session on this CPU (cpu for cuda, fp32, smoke sizes, a few updates) in a few minutes, to prove it end to end;
# it installs nothing (this machine's environment is shared) and is not part of .ci/run.
# --out: default $OUT when set (the device tool's folder that comes back), else runs/gpu_session.
# STAGES, comma-separated, run in order (setup always runs first and is skipped when already done on this machine):
#   setup   torch check (the GPU machine's own CUDA build; its version vs the pin is recorded), pip install of the
#           carried wheels (--no-index --no-deps: each at its constraints.txt pin, DeepSpeed too if carried), corpora
#           unpacked from .gpu_carry/data/data.tar.xz (HF_TLASER_DATA), environment.json
#   bench   python -m benchmarks --only 1 2 3 --device cuda --presets small paper: training tokens/s of T-LASER,
#           LASER_6, LASER_1 (matched tiny widths, then the small and paper presets), cT-LASER vs T-LASER (pair and
#           multi-way, tiny/small/paper widths), encode vs sentence-transformers on a same-size BERT; the machine
#           header names the GPU, the driver and the measured bf16 matmul peak
#   dist    docs/configs/accelerate_fsdp.yaml (1 process) for a few hundred updates, then DeepSpeed ZeRO-2
#           (docs/configs/deepspeed_zero2.json) if it installed; distributed.json says what ran and whether the
#           FSDP checkpoint is sharded (FSDP really active)
#   train   a `small` cT-LASER on all the shared training corpora for --train-minutes with checkpoints
#           (scripts/learning_curve.py train), started DETACHED (setsid) with a checkpoint evaluator beside it; the
#           command watches it for --wait-minutes (default: until the deadline) and returns, the run goes on
#           while the machine stays warm
#   finish  waits for that run, evaluates its last checkpoints, the learning curve (scripts/learning_curve.py
#           report: table + PNG) and `hf-tlaser evaluate` (NTREX-128 retrieval + SIB-200)
#   release the release recipe (scripts/release.py: 2,000 updates from multilingual-e5-small, the dev sets, SIB-200,
#           the card), timed. On an H100 (2026-11-26): data 2.4 min (the host's CPU), training 3.1, evaluation 2.6
#   levers  after release: the release curve's levers at 500 updates, side by side: twice the batch at equal tokens
#           (--update-tokens 2000, 250 updates), self-distillation toward the start (--teacher, weights 100 and
#           1000), each evaluated as the recipe's own checkpoint 500 is (dev sets, SIB-200 seed 0)
#   negatives  issue 53's question on a GPU, from the start at 200 updates, side by side: the recipe (1,000 tokens,
#           ~35 pairs a micro-batch), one micro-batch of 32,000 tokens per update (~870 pairs, each the others'
#           negatives), the same pairs per update in micro-batches of 4,000 (~130 negatives), and 8,000 tokens;
#           and, at the release recipe's 2,000 updates of 1,000 tokens, the recipe and 62 updates of 32,000 tokens;
#           each evaluated as the levers are. Needs the release stage's data (--prepare-release), not its run
#           Seen on an H200 (2026-11-28, --deadline-minutes 8.8): 424 s; six runs on one GPU, so three stopped
#           at the safety stop (docs/results.md, "Many in-batch negatives")
#   all     setup,bench,dist,train,finish in one command (train then waits until the run is done): --size tiny
#
# Time plan of one 30-minute lease (full): three back-to-back device calls of at most 10 minutes each. A machine
# stays warm only 30 s after a call: send the next call AT ONCE, or the detached run (and what setup installed)
# is gone. Every stage checks the call's --deadline-minutes (default 9.5), bounds its commands with timeouts and
# publishes into $OUT after it. Minutes are estimates (of these stages, only setup has run on a GPU; leases are 15
# minutes now, so this plan needs two sessions' worth):
#   call 1  --stage bench        machine start ~1.5 + setup ~1 (pip from .gpu_carry, unpack corpora) + bench ~6.5
#                                (matched tiny ~1, small presets ~1.5, paper presets ~2, distance ~1, encode ~1) ~ 9
#   call 2  --stage dist,train   setup again only if the machine is fresh; FSDP ~2 + DeepSpeed ~2 (300 updates of
#                                `small` each, at most 1.5 min of training); then the `small` cT-LASER starts
#                                detached (--train-minutes 10 after data + 32k BPE, ~1.5) and is watched until
#                                the deadline                                                              ~ 9.5
#   call 3  --stage finish       the run's last ~6 minutes (its checkpoints are evaluated while it trains),
#                                then the last points, the TF-IDF line, the curve and hf-tlaser evaluate   ~ 8.5
#   in all ~28 device-minutes. --train-minutes 10 is what fits beside the benchmarks in 30; a lease that ran the
#   bench stage elsewhere can take --train-minutes 15 (then call 3 needs --deadline-minutes 9.8 and may stop the
#   run early: finish keeps 3 minutes for the evaluations and stops a run that would eat into them).
#   If the machine was given back between calls 2 and 3 (finish says "no run on this machine"), one call does a
#   short run instead: --stage train,finish --train-minutes 4 --wait-minutes 6.
#   Each device call: carry [".gpu_carry"] (wheels 25.2 MiB + corpora 32.3 MiB + the tree 1.6 MiB = 59 MiB of 64;
#   `--prepare` prints the sum), command `bash scripts/gpu_session.sh --stage STAGES`. The corpora archive holds
#   the training mix whole except Europarl, cut to its first ~357k of 694k pairs to fit (DATA.txt says how many).
# The release stage reads the start and the whole release corpora: 111 MiB as xz, 134 MiB with the wheels, three
#   calls' worth. --prepare-release writes .gpu_carry/part1..3 (part1 sized to travel beside the
#   wheels). Send the calls back to back (a machine stays warm 30 s): carry [".gpu_carry/wheels", ".gpu_carry/part1"],
#   command `mkdir -p /tmp/parts && cp .gpu_carry/part1/* /tmp/parts/ && HF_TLASER_DATA=/tmp bash
#   scripts/gpu_session.sh --stage setup`; then carry [".gpu_carry/part2"], `cp .gpu_carry/part2/* /tmp/parts/`;
#   last, carry [".gpu_carry/part3"], `mkdir -p .gpu_carry/data && cat /tmp/parts/* .gpu_carry/part3/*
#   >.gpu_carry/data/data.tar.xz && bash scripts/gpu_session.sh --stage release --deadline-minutes 9.2`. Seen on an
#   H100: 626 s of device time for the three calls, the machine's start included. The levers need a call of their
#   own on the same warm machine; they have not run to the end yet (a first try beside the release evaluation was
#   cut at updates 235 of 250, 60 and 16 of 500).
# $OUT (at most 8 files): SUMMARY.md, BENCHMARKS.md, BENCHMARKS.json, environment.json, learning_curve.md,
#   learning_curve.png, results.tar.gz (distributed.json, train.json, curve.json, the evaluation report), logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

SIZE=full
OUT_DIR=${OUT:-runs/gpu_session}
STAGES=all
TRAIN_MIN=""
WAIT_MIN=""
SAVE_STEPS=""
DEADLINE_MIN=""
CARRY=.gpu_carry

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
die() {
    echo "gpu_session: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    --size) SIZE=${2:?}; shift 2 ;;
    --out) OUT_DIR=${2:?}; shift 2 ;;
    --stage | --stages) STAGES=${2:?}; shift 2 ;;
    --train-minutes) TRAIN_MIN=${2:?}; shift 2 ;;
    --wait-minutes) WAIT_MIN=${2:?}; shift 2 ;;
    --save-steps) SAVE_STEPS=${2:?}; shift 2 ;;
    --deadline-minutes) DEADLINE_MIN=${2:?}; shift 2 ;;
    --fetch-wheels) exec python scripts/gpu_session.py fetch-wheels "${2:-$CARRY/wheels}" ;;
    --pack-data) exec python scripts/gpu_session.py pack-data "${2:-$CARRY/data}" ;;
    --prepare)
        mkdir -p .git/info && { grep -qx "/$CARRY/" .git/info/exclude 2>/dev/null || echo "/$CARRY/" >>.git/info/exclude; }
        python scripts/gpu_session.py fetch-wheels "$CARRY/wheels" || exit
        python scripts/gpu_session.py pack-data "$CARRY/data" || exit
        exec python scripts/gpu_session.py carry-size "$CARRY" ;;
    --prepare-release)
        mkdir -p .git/info && { grep -qx "/$CARRY/" .git/info/exclude 2>/dev/null || echo "/$CARRY/" >>.git/info/exclude; }
        python scripts/gpu_session.py fetch-wheels "$CARRY/wheels" --no-deepspeed || exit
        python scripts/gpu_session.py pack-data "$CARRY/release-data" --release --budget-mib 220 || exit
        exec python scripts/gpu_session.py split "$CARRY/release-data/data.tar.xz" "$CARRY" --beside "$CARRY/wheels" ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done
case "$SIZE" in tiny | full) ;; *) die "--size $SIZE: expected tiny or full" ;; esac
[ "$STAGES" = all ] && STAGES=setup,bench,dist,train,finish

# ------------------------------------------------------------------------------------------------ sizes
if [ "$SIZE" = full ]; then
    DEVICE=cuda
    BENCH_SIZE=full
    PY=${PYTHON:-python3}
    WORK=${HF_TLASER_GPU_WORK:-/tmp/hf_tlaser_gpu}
    TRAIN_MIN=${TRAIN_MIN:-10}
    WAIT_MIN=${WAIT_MIN:-}       # the train stage watches the run until the call's deadline
    FINISH_RESERVE=180           # seconds the finish stage keeps for the evaluations
    BENCH_LIMIT=480              # seconds
    BENCH_PRESETS=(small paper)
    DIST_ARGS=(--preset small --max-steps 300 --save-steps 150 --max-minutes 1.5 --max-lines 30000 --vocab-size 8000
        --logging-steps 25)
    DIST_PROCS=1
    DIST_LIMIT=150
    TRAIN_ARGS=(--preset small --max-steps 1000000)
    EVAL_ARGS=(--seeds 0 1 2)
    FINISH_EVAL_LIMIT=240
    RELEASE_ARGS=()              # the recipe as it is: 2,000 updates, the dev sets, SIB-200 seeds 0 1 2
    RELEASE_TRAIN=()
    LEVER_UPDATES=500
    LEVER_EVAL=(--seeds 0)
    NEG_UPDATES=200 NEG_LONG=2000 NEG_BIG=32000 NEG_ACC=4000 NEG_MID=8000 NEG_RESERVE=360 # s: data ~170, evaluation ~180
    DEADLINE_MIN=${DEADLINE_MIN:-9.5}
else
    DEVICE=cpu
    BENCH_SIZE=smoke
    PY=${PYTHON:-python}
    WORK=${HF_TLASER_GPU_WORK:-${TMPDIR:-/tmp}/hf_tlaser_gpu_tiny}
    TRAIN_MIN=${TRAIN_MIN:-1}
    WAIT_MIN=${WAIT_MIN:-}       # all stages in one command: the train stage waits for the run
    FINISH_RESERVE=120
    BENCH_LIMIT=600              # a shared 2-core machine: 15 s idle, minutes when busy
    DIST_ARGS=(--preset tiny --max-steps 4 --save-steps 2 --max-lines 300 --vocab-size 500 --logging-steps 1)
    BENCH_PRESETS=(small)        # shrunk at smoke size: `paper` would run the same code on the same shapes again
    DIST_PROCS=2                 # gloo: accelerate runs DDP on a CPU whatever the config (FSDP needs a GPU)
    DIST_LIMIT=180
    TRAIN_ARGS=(--preset tiny --max-steps 6 --max-lines 2000 --vocab-size 1000)
    SAVE_STEPS=${SAVE_STEPS:-3}  # curve points: random init, update 3, update 6
    EVAL_ARGS=(--seeds 0 --epochs 20 --projection none)
    FINISH_EVAL_LIMIT=300
    RELEASE_ARGS=(--updates 4 --seeds 0 --epochs 5 --retrieval-sets ntrex128)
    RELEASE_TRAIN=(--save-steps 2)
    LEVER_UPDATES=2
    LEVER_EVAL=(--seeds 0 --epochs 5)
    NEG_UPDATES=2 NEG_LONG=4 NEG_BIG=2000 NEG_ACC=500 NEG_MID=1000 NEG_RESERVE=600
    DEADLINE_MIN=${DEADLINE_MIN:-30}
fi
START=$(date +%s)
DEADLINE=$((START + $(awk -v m="$DEADLINE_MIN" 'BEGIN { printf "%d", m * 60 }')))
RESULTS=$WORK/results # survives between calls while the machine stays warm; published into $OUT after each stage
LOGS=$WORK/logs
RUN=$WORK/train/ctlaser-small
mkdir -p "$RESULTS" "$LOGS" "$OUT_DIR" || die "cannot create $RESULTS, $LOGS or $OUT_DIR"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1

say() { echo "[gpu_session $(date +%H:%M:%S) +$(($(date +%s) - START))s] $*"; }
left() { echo $((DEADLINE - $(date +%s))); }   # seconds left in this call
# limit SECONDS LOG CMD...: run CMD with its output in LOG (and on stdout), killed after SECONDS (capped by the
# deadline, keeping 20 s to publish); the exit status of CMD, 124 when killed
limit() {
    local seconds=$1 log=$2
    shift 2
    local cap=$(($(left) - 20))
    [ "$cap" -lt "$seconds" ] && seconds=$cap
    if [ "$seconds" -le 5 ]; then
        say "no time left for: $*" | tee -a "$log"
        return 124
    fi
    say "\$ $* (limit ${seconds}s, log $log)"
    timeout --kill-after=10 "$seconds" "$@" >>"$log" 2>&1
    local rc=$?
    tr '\r' '\n' <"$log" | grep -v '^ *$' | tail -n 3 | cut -c1-240
    return $rc
}
note() { # note FILE KEY VALUE: a JSON object file, one more key
    "$PY" scripts/gpu_session.py note "$@"
}

publish() { # at most 8 flat files into $OUT, each under 16 MiB
    "$PY" scripts/gpu_session.py summary "$RESULTS" >/dev/null 2>>"$LOGS/publish.log" || say "summary failed (see logs)"
    for f in SUMMARY.md BENCHMARKS.md BENCHMARKS.json environment.json learning_curve.md learning_curve.png; do
        [ -f "$RESULTS/$f" ] && cp "$RESULTS/$f" "$OUT_DIR/$f"
    done
    local extra=() f
    for f in distributed.json train.json; do [ -f "$RESULTS/$f" ] && extra+=("results/$f"); done
    [ -f "$RUN/curve.json" ] && extra+=("train/ctlaser-small/curve.json")
    [ -d "$WORK/eval" ] && extra+=("eval")
    [ -f "$RESULTS/release.json" ] && extra+=("results/release.json")
    for f in "$WORK"/release/{README.md,trainer_state.json,train_log.jsonl,hf_tlaser_train.json,eval/results.json} \
        "$WORK"/levers/*/{results.json,train_log.jsonl,hf_tlaser_train.json}; do
        [ -f "$f" ] && extra+=("${f#"$WORK"/}")
    done
    [ ${#extra[@]} -gt 0 ] && tar -czf "$OUT_DIR/results.tar.gz" -C "$WORK" "${extra[@]}"
    tar -czf "$OUT_DIR/logs.tar.gz" -C "$WORK" logs
    for f in "$OUT_DIR"/*; do
        [ "$(stat -c %s "$f")" -gt $((16 * 1024 * 1024)) ] && say "WARNING: $f is over 16 MiB and will not come back"
    done
    say "published $(find "$OUT_DIR" -maxdepth 1 -type f | wc -l) files into $OUT_DIR"
}

# ------------------------------------------------------------------------------------------------ setup
stage_setup() {
    local torch_version pin
    torch_version=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) || die "no torch in $PY: the GPU machine's python3 has it; set PYTHON"
    pin=$(sed -n 's/^torch==\([^ ;]*\).*/\1/p' constraints.txt)
    say "torch $torch_version here (constraints.txt pins $pin); cuda available: $("$PY" -c 'import torch; print(torch.cuda.is_available())')"
    if [ "$SIZE" = full ] && ! "$PY" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
        die "--size full needs CUDA and torch sees none (use --size tiny on a CPU)"
    fi
    local marker=$WORK/.setup_done install="not run"
    if [ -f "$marker" ]; then
        say "setup: already done on this machine ($(cat "$marker"))"
    elif [ "$SIZE" = tiny ]; then
        install="skipped: --size tiny installs nothing into this shared environment"
        say "setup: $install; on the GPU machine: $PY -m pip install --no-index --no-deps $CARRY/wheels/*.whl, then -e ."
    else
        [ -d "$CARRY/wheels" ] || die "no $CARRY/wheels: run scripts/gpu_session.sh --prepare here and name $CARRY in the call's carry"
        # the carried wheels as they are (each at its constraints.txt pin), without a resolver: faiss-cpu, a core
        # dependency, stays home (SKIPPED), so pip could never resolve hf_tlaser's requirements here; the image has
        # the rest (seen on an H100 machine, 2026-11-26), and the import check below says if that changes
        local pip_args=(-m pip install --no-index --no-deps --no-build-isolation --disable-pip-version-check)
        if limit 240 "$LOGS/setup.log" "$PY" "${pip_args[@]}" "$CARRY"/wheels/*.whl &&
            limit 120 "$LOGS/setup.log" "$PY" "${pip_args[@]}" -e .; then
            install="carried wheels at their constraints.txt pins (--no-deps), the image's versions of the rest"
        else
            die "pip install failed (logs in $LOGS/setup.log): $(grep -E 'ERROR' "$LOGS/setup.log" | tail -1)"
        fi
        say "setup: installed ($install)"
    fi
    # the corpora: the carried archive if any, else this machine's data dir
    if [ -f "$CARRY/data/data.tar.xz" ]; then
        if [ ! -f "$WORK/data/.unpacked" ]; then
            rm -rf "$WORK/data" && mkdir -p "$WORK/data"
            tar -xJf "$CARRY/data/data.tar.xz" -C "$WORK/data" || die "cannot unpack $CARRY/data/data.tar.xz"
            touch "$WORK/data/.unpacked"
        fi
        export HF_TLASER_DATA=$WORK/data
        say "corpora: $(cat "$CARRY/data/DATA.txt" 2>/dev/null || echo "$CARRY/data/data.tar.xz") -> $HF_TLASER_DATA"
    else
        export HF_TLASER_DATA=${HF_TLASER_DATA:-$("$PY" -c 'from hf_tlaser.data.paths import get_data_dir; print(get_data_dir())')} ||
            die "no corpora: no $CARRY/data/data.tar.xz (scripts/gpu_session.sh --pack-data) and no data dir here"
        say "corpora: $HF_TLASER_DATA (no carried archive)"
    fi
    if [ "$SIZE" = tiny ] && [ ! -f "$WORK/tiny-data/.made" ]; then
        # tiny: a copy of the corpora with NTREX-128 and SIB-200 cut to their first lines, so that every evaluation
        # (curve points, TF-IDF reference, hf-tlaser evaluate) takes seconds on a CPU; the training mix is whole
        rm -rf "$WORK/tiny-data" && mkdir -p "$WORK/tiny-data"
        for d in "$HF_TLASER_DATA"/*/; do
            d=${d%/}
            case "${d##*/}" in
            ntrex128 | sib200) cp -r "$d" "$WORK/tiny-data/" ;;
            *) ln -s "$d" "$WORK/tiny-data/${d##*/}" ;;
            esac
        done
        chmod -R u+w "$WORK/tiny-data/ntrex128" "$WORK/tiny-data/sib200"
        for f in "$WORK"/tiny-data/ntrex128/*.txt "$WORK"/tiny-data/ntrex128/DOCUMENT_IDS.tsv; do
            head -n 300 "$f" >"$f.cut" && mv "$f.cut" "$f"
        done
        for f in "$WORK"/tiny-data/sib200/*/*.tsv; do
            case "$f" in */train.tsv) n=141 ;; */dev.tsv) n=31 ;; *) n=71 ;; esac
            head -n "$n" "$f" >"$f.cut" && mv "$f.cut" "$f"
        done
        touch "$WORK/tiny-data/.made"
    fi
    if [ "$SIZE" = tiny ]; then
        export HF_TLASER_DATA=$WORK/tiny-data
        say "corpora (tiny): $HF_TLASER_DATA, NTREX-128 cut to 300 lines, SIB-200 to 140/30/70 per language"
    fi
    "$PY" scripts/gpu_session.py environment --output "$RESULTS/environment.json" "$install" "$torch_version" "$pin" \
        "$SIZE" "$HF_TLASER_DATA" 2>>"$LOGS/setup.log" || say "environment.json failed"
    "$PY" -c 'import hf_tlaser, transformers, datasets, sentence_transformers' 2>>"$LOGS/setup.log" || die "hf_tlaser does not import after setup (logs/setup.log)"
    [ -f "$marker" ] || echo "torch $torch_version; $install" >"$marker"
}

# ------------------------------------------------------------------------------------------------ bench
stage_bench() {
    limit "$BENCH_LIMIT" "$LOGS/bench.log" "$PY" -m benchmarks --size "$BENCH_SIZE" --only 1 2 3 --device "$DEVICE" \
        --presets "${BENCH_PRESETS[@]}" --output "$RESULTS/BENCHMARKS.md"
    local rc=$?
    if [ $rc -eq 0 ]; then say "bench: done"; else say "bench: FAILED (exit $rc; logs/bench.log)"; fi
}

# ------------------------------------------------------------------------------------------------ dist
precision() {
    if [ "$DEVICE" = cpu ]; then
        echo fp32
    else
        "$PY" -c 'import torch; print("bf16" if torch.cuda.is_bf16_supported() else "fp16")'
    fi
}

dist_run() { # dist_run NAME LAUNCHER_ARGS...: one accelerate launch of the training CLI, its facts into distributed.json
    local name=$1
    shift
    local out=$WORK/dist/$name prec mixed
    prec=$(precision)
    mixed=$([ "$prec" = fp32 ] && echo no || echo "$prec")
    rm -rf "$out"
    local begin
    begin=$(date +%s)
    # one process: the rank variables make accelerate set up the process group (and so FSDP / DeepSpeed) even
    # where it starts the script directly; a launcher that starts ranks itself sets its own
    local ranks=()
    [ "$DIST_PROCS" = 1 ] && ranks=(RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1)
    limit "$DIST_LIMIT" "$LOGS/dist-$name.log" env MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29500 + RANDOM % 1000)) \
        "${ranks[@]}" "$PY" -m accelerate.commands.launch "$@" --num_processes "$DIST_PROCS" --num_machines 1 \
        --mixed_precision "$mixed" --dynamo_backend no -m hf_tlaser.training.cli --model ctlaser \
        "${DIST_ARGS[@]}" --precision "$prec" --output-dir "$out"
    local rc=$?
    "$PY" scripts/gpu_session.py dist-facts "$RESULTS/distributed.json" "$name" "$out" "$rc" \
        "$(($(date +%s) - begin))" "$LOGS/dist-$name.log"
    return $rc
}

stage_dist() {
    mkdir -p "$WORK/dist"
    if dist_run fsdp --config_file docs/configs/accelerate_fsdp.yaml; then
        say "dist: FSDP config ran"
    else
        say "dist: FSDP run FAILED (logs/dist-fsdp.log)"
    fi
    if "$PY" -c 'import deepspeed' >/dev/null 2>&1; then
        if dist_run deepspeed --use_deepspeed --deepspeed_config_file docs/configs/deepspeed_zero2.json; then
            say "dist: DeepSpeed ZeRO-2 ran"
        else
            say "dist: DeepSpeed ZeRO-2 run FAILED (logs/dist-deepspeed.log)"
        fi
    else
        note "$RESULTS/distributed.json" deepspeed '"skipped: deepspeed does not import here (not installed)"'
        say "dist: DeepSpeed skipped (does not import)"
    fi
}

# ------------------------------------------------------------------------------------------------ train
save_steps() { # ~12 checkpoints over the run, from the bench stage's small cT-LASER tokens/s when there is one
    if [ -n "$SAVE_STEPS" ]; then echo "$SAVE_STEPS"; return; fi
    "$PY" scripts/gpu_session.py save-steps "$RESULTS/BENCHMARKS.json" "$TRAIN_MIN"
}

stage_train() {
    if [ -f "$WORK/train.pid" ] && kill -0 "$(cat "$WORK/train.pid")" 2>/dev/null; then
        say "train: a run is already going (pid $(cat "$WORK/train.pid")); watching it"
    else
        local steps
        steps=$(save_steps)
        rm -rf "$RUN" && mkdir -p "$(dirname "$RUN")"
        say "train: cT-LASER ${TRAIN_ARGS[*]} for $TRAIN_MIN minutes, a checkpoint every $steps updates, detached"
        # --save-steps BEFORE the run folder: after it, argparse's REMAINDER takes it for hf-tlaser train, whose
        # later default --save-steps 100 then wins
        setsid nohup "$PY" scripts/learning_curve.py train --save-steps "$steps" "$RUN" -- --model ctlaser \
            "${TRAIN_ARGS[@]}" --max-minutes "$TRAIN_MIN" --precision "$(precision)" >"$LOGS/train.log" 2>&1 &
        echo $! >"$WORK/train.pid"
        # the checkpoint evaluator beside it: the learning curve grows while the run trains
        # shellcheck disable=SC2016  # $1..$4 are the inner shell's arguments
        setsid nohup bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 20; "$2" scripts/learning_curve.py evaluate "$3" >>"$4" 2>&1; done' \
            _ "$(cat "$WORK/train.pid")" "$PY" "$RUN" "$LOGS/curve.log" >/dev/null 2>&1 &
        echo $! >"$WORK/curve.pid"
        # the TF-IDF reference line of the curve (CPU only) beside them, while the GPU trains
        setsid nohup timeout 900 "$PY" scripts/learning_curve.py lexical --output "$WORK/lexical.json" \
            >"$LOGS/lexical.log" 2>&1 &
        echo $! >"$WORK/lexical.pid"
        note "$RESULTS/train.json" started "\"$(date -u +%FT%TZ)\""
        note "$RESULTS/train.json" train_minutes "$TRAIN_MIN"
        note "$RESULTS/train.json" save_steps "$steps"
    fi
    watch_run "${WAIT_MIN:-}" 30 || say "train: the run goes on detached: send the next call AT ONCE (--stage finish)"
}

progress() { # the run's last logged loss, throughput and epoch, and its checkpoints so far
    local last
    last=$(grep -o "{'loss'[^}]*}" "$LOGS/train.log" 2>/dev/null | tail -1 |
        grep -o "'\(loss\|tokens_per_second\|pairs\|epoch\)': '\{0,1\}[0-9.e+-]*" | tr -d "'" | tr '\n' ' ')
    echo "${last:-no update logged yet} | checkpoints: $(find "$RUN" -maxdepth 1 -name 'checkpoint-*' 2>/dev/null | wc -l)"
}

watch_run() { # watch_run MINUTES RESERVE: wait for the run, at most MINUTES ("": no limit) and until RESERVE seconds
    local pid until       # are left in the call; 0 when the run has ended, 1 when it still runs
    pid=$(cat "$WORK/train.pid")
    until=$(($(date +%s) + $(awk -v m="${1:-1000}" 'BEGIN { printf "%d", m * 60 }')))
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$(date +%s)" -ge "$until" ] || [ "$(left)" -le "$2" ]; then
            say "train: still running (pid $pid): $(progress)"
            return 1
        fi
        sleep 15
        say "train: $(progress)"
    done
    say "train: the run has ended: $(tr '\r' '\n' <"$LOGS/train.log" | grep -v '^ *$' | tail -n 1 | cut -c1-200)"
}

# ------------------------------------------------------------------------------------------------ finish
stage_finish() {
    if [ ! -f "$WORK/train.pid" ]; then
        say "finish: no run on this machine (it was given back since the train stage?): run --stage train,finish --train-minutes 5 --wait-minutes 7"
        note "$RESULTS/train.json" finish '"no run on this machine"'
        return 1
    fi
    local pid
    pid=$(cat "$WORK/train.pid")
    if ! watch_run "" "$FINISH_RESERVE"; then
        say "finish: the run would outlast the evaluations' time in this call; stopping it (its checkpoints count)"
        kill -TERM -- "-$pid" 2>/dev/null
        sleep 10
    fi
    [ -f "$WORK/curve.pid" ] && kill -TERM -- "-$(cat "$WORK/curve.pid")" 2>/dev/null
    limit "$FINISH_EVAL_LIMIT" "$LOGS/curve.log" "$PY" scripts/learning_curve.py evaluate "$RUN" ||
        say "finish: learning_curve evaluate FAILED or was cut (logs/curve.log)"
    local waited=0
    while [ -f "$WORK/lexical.pid" ] && kill -0 "$(cat "$WORK/lexical.pid")" 2>/dev/null && [ "$(left)" -gt 60 ]; do
        [ $waited -eq 0 ] && say "finish: waiting for the TF-IDF reference (logs/lexical.log)"
        sleep 5
        waited=$((waited + 5))
    done
    if [ ! -s "$WORK/lexical.json" ]; then
        limit 180 "$LOGS/lexical.log" "$PY" scripts/learning_curve.py lexical --output "$WORK/lexical.json"
    fi
    if ! limit 60 "$LOGS/curve.log" "$PY" scripts/learning_curve.py report "$RUN" --lexical "$WORK/lexical.json" \
        --output "$RESULTS/learning_curve.md"; then
        say "finish: learning curve report FAILED (logs/curve.log)"
    fi
    local model=$RUN
    [ -f "$RUN/config.json" ] || model=$(find "$RUN" -maxdepth 1 -name 'checkpoint-*' | sort -t- -k2 -n | tail -1)
    if [ -n "$model" ] && [ -f "$model/config.json" ]; then
        rm -rf "$WORK/eval"
        limit "$FINISH_EVAL_LIMIT" "$LOGS/evaluate.log" "$PY" -m hf_tlaser.cli evaluate "$model" --suite retrieval sib200 \
            --retrieval-sets ntrex128 --output-dir "$WORK/eval" "${EVAL_ARGS[@]}" || say "finish: hf-tlaser evaluate FAILED (logs/evaluate.log)"
    else
        say "finish: no saved model or checkpoint in $RUN"
    fi
    "$PY" scripts/gpu_session.py train-facts "$RESULTS/train.json" "$RUN" "$WORK/eval/results.json" ||
        say "finish: train.json failed"
    say "finish: done"
}

# ------------------------------------------------------------------------------------------------ release
stage_release() { # the release recipe (scripts/release.py) on this device, timed: training, then the evaluation
    local out=$WORK/release start=$SECONDS pid trained=""
    [ -f "$HF_TLASER_DATA/multilingual-e5-small/config.json" ] ||
        { say "release: no start in $HF_TLASER_DATA/multilingual-e5-small (pack-data --release)"; return 1; }
    [ -e "$out" ] && say "release: $out exists on this machine: release.py continues it (or evaluates it, if trained)"
    say "release: scripts/release.py ${RELEASE_ARGS[*]}, the recipe's checkpoints kept for the levers"
    # --save-total-limit after --: every 250-update checkpoint stays (the levers' plain point)
    "$PY" scripts/release.py --output "$out" --data-dir "$HF_TLASER_DATA" "${RELEASE_ARGS[@]}" -- \
        --save-total-limit 100 "${RELEASE_TRAIN[@]}" >"$LOGS/release.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if [ -z "$trained" ] && [ -f "$out/trainer_state.json" ]; then
            trained=$((SECONDS - start))
            note "$RESULTS/release.json" train_seconds "$trained"
            say "release: trained in ${trained} s (data included); evaluating"
        fi
        if [ "$(left)" -le 25 ]; then
            say "release: out of time; stopping it (started again, release.py evaluates the trained model)"
            kill -TERM "$pid" 2>/dev/null
            break
        fi
        sleep 5
    done
    wait "$pid"
    note "$RESULTS/release.json" exit "$?"
    note "$RESULTS/release.json" seconds "$((SECONDS - start))"
    note "$RESULTS/release.json" device "\"$DEVICE\""
    tr '\r' '\n' <"$LOGS/release.log" | grep -E '^release:|Error' | tail -n 3
}

lever() { # lever NAME UPDATES TRAIN_ARGS...: one warm-start run at the release recipe, then its dev-set evaluation
    local name=$1 updates=$2
    shift 2
    timeout $(($(left) - 20)) nice -n 10 "$PY" -m hf_tlaser.cli train --model ctlaser --seed 1 --corpora "$RELEASE_CORPORA" \
        --init-from "$HF_TLASER_DATA/multilingual-e5-small" --data-dir "$HF_TLASER_DATA" --max-steps "$updates" \
        --save-steps 1000000 --output-dir "$WORK/levers/$name" "$@" "${RELEASE_TRAIN[@]}" >"$LOGS/lever-$name.log" 2>&1 &&
        lever_eval "$name" "$WORK/levers/$name"
}

lever_eval() { # lever_eval NAME FOLDER: the release recipe's retrieval sets, Multi30k test 2016 and SIB-200 (seed 0)
    local m30k=$HF_TLASER_DATA/multi30k/task1-raw/test_2016_flickr
    timeout $(($(left) - 20)) nice -n 10 "$PY" -m hf_tlaser.cli evaluate "$2" --suite retrieval sib200 --data-dir "$HF_TLASER_DATA" \
        --retrieval-sets $RELEASE_SETS \
        "files:cs=$m30k.cs.gz:de=$m30k.de.gz:en=$m30k.en.gz:fr=$m30k.fr.gz" \
        --projection none --no-references "${LEVER_EVAL[@]}" --output-dir "$WORK/levers/$1-eval" >>"$LOGS/lever-$1.log" 2>&1
    say "lever $1: exit $? ($(tail -c 160 "$LOGS/lever-$1.log" | tr '\r\n' '  '))"
}

release_facts() { # the release recipe's corpora and retrieval sets, read once from scripts/release.py for every lever
    mkdir -p "$WORK/levers"
    RELEASE_CORPORA=$("$PY" -c 'import runpy; print(runpy.run_path("scripts/release.py")["CORPORA"])')
    RELEASE_SETS=$("$PY" -c 'import runpy; print(*runpy.run_path("scripts/release.py")["RETRIEVAL_SETS"])')
}

stage_levers() { # the release curve's levers at LEVER_UPDATES against the recipe's own checkpoint there, side by side
    release_facts
    local start=$HF_TLASER_DATA/multilingual-e5-small plain=$WORK/release/checkpoint-$LEVER_UPDATES
    if [ -d "$plain" ]; then lever_eval plain "$plain" & else say "levers: no $plain (run the release stage first)"; fi
    lever batch2x $((LEVER_UPDATES / 2)) --update-tokens 2000 &   # equal tokens: twice the batch, half the updates
    lever distill100 "$LEVER_UPDATES" --teacher "$start" --distill-weight 100 &
    lever distill1000 "$LEVER_UPDATES" --teacher "$start" --distill-weight 1000 &
    wait
}

stage_negatives() { # issue 53: in-batch negatives at NEG_UPDATES, side by side from the start, nothing else changed
    # big: one micro-batch of NEG_BIG padded tokens per update (~NEG_BIG/37 pairs, each the others' negatives);
    # acc: the same pairs per update as big, in micro-batches of NEG_ACC tokens (NEG_BIG/NEG_ACC x fewer negatives);
    # mid: one micro-batch of NEG_MID tokens; plain: the recipe's 1,000 tokens (~35 pairs)
    # a run still training when only the data's and the evaluation's minutes are left stops and saves (the safety stop)
    local stop
    stop=$(awk -v s="$(left)" -v r="$NEG_RESERVE" 'BEGIN { m = (s - r) / 60; printf "%.1f", m < 0.5 ? 0.5 : m }')
    release_facts
    say "negatives: $NEG_UPDATES updates each, training stopped after $stop min at the latest"
    lever plain "$NEG_UPDATES" --max-minutes "$stop" &
    lever big "$NEG_UPDATES" --max-minutes "$stop" --max-tokens "$NEG_BIG" --update-tokens "$NEG_BIG" &
    lever acc "$NEG_UPDATES" --max-minutes "$stop" --max-tokens "$NEG_ACC" --update-tokens "$NEG_BIG" &
    lever mid "$NEG_UPDATES" --max-minutes "$stop" --max-tokens "$NEG_MID" --update-tokens "$NEG_MID" &
    # at the release recipe's tokens (NEG_LONG updates of 1,000): the recipe itself, and the big batch's updates
    lever plain-long "$NEG_LONG" --max-minutes "$stop" &
    lever big-long $((NEG_LONG * 1000 / NEG_BIG)) --max-minutes "$stop" --max-tokens "$NEG_BIG" --update-tokens "$NEG_BIG" &
    wait
}

# ------------------------------------------------------------------------------------------------ main
say "size $SIZE, device $DEVICE, stages $STAGES, work $WORK, out $OUT_DIR, deadline ${DEADLINE_MIN} min"
stage_setup
IFS=, read -r -a stage_list <<<"$STAGES"
for stage in "${stage_list[@]}"; do
    case "$stage" in
    setup) ;;
    bench | dist | train | finish | release | levers | negatives)
        if [ "$(left)" -le 30 ]; then
            say "no time left in this call for stage $stage"
            continue
        fi
        say "=== stage $stage"
        "stage_$stage"
        publish ;;
    *) say "unknown stage $stage (setup, bench, dist, train, finish, release, levers, negatives, all)" ;;
    esac
done
publish
"$PY" scripts/gpu_session.py summary "$RESULTS" 2>/dev/null | tail -n 40
say "done in $(($(date +%s) - START)) s; results in $OUT_DIR: $(find "$OUT_DIR" -maxdepth 1 -type f -printf '%f ' | sort)"
