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
#           at the safety stop (docs/history.md, "Many in-batch negatives")
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
# The session (flags, stages, deadline, time limits, detached run, publishing) is `scripts/gpu_session.py run` (its
#   parts: the package scripts/gpu/), which takes this command line as it is and needs only the standard library (it
#   runs before setup's pip install): this file only starts it from the repository root, under $PYTHON (default
#   python3).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
exec "${PYTHON:-python3}" scripts/gpu_session.py run "$@"
