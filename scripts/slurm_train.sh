#!/usr/bin/env bash
# `hf-tlaser train` across machines under Slurm: one task per machine, each starting `accelerate launch` with its
# machine rank (the task's rank), the job's first node as the main process and PROCS_PER_NODE processes per machine.
# The arguments are hf-tlaser train's.
#
#   sbatch --nodes 4 --gpus-per-node 8 scripts/slurm_train.sh --model ctlaser --preset paper --output-dir runs/ct ...
#   sbatch --nodes 2 --gpus-per-node 8 --export ALL,ACCELERATE_CONFIG=docs/configs/accelerate_fsdp.yaml \
#       scripts/slurm_train.sh ...
#
# Environment (sbatch passes the submitting shell's):
#   PROCS_PER_NODE     processes per machine (default: the GPUs Slurm gave the node, else 1)
#   ACCELERATE_CONFIG  an accelerate config file (FSDP, ...); its machine and process counts are replaced by the job's;
#                      default: DDP (`--multi_gpu`; with hf-tlaser train --use-cpu, gloo on CPU)
#   MAIN_PORT          the rendezvous port on the first node (default 29500)
#   PYTHON             the python that has hf_tlaser (default: python)
# Two tasks on one node stand for two machines (scripts/slurm_local.sh; each machine is one CPU process, gloo):
#   sbatch --nodes 1 --ntasks 2 --ntasks-per-node 2 --cpus-per-task 1 scripts/slurm_train.sh ... --use-cpu
#SBATCH --job-name=hf-tlaser-train
#SBATCH --ntasks-per-node=1
#SBATCH --output=%x-%j.out
set -euo pipefail

export MACHINES=${SLURM_NTASKS:?"run it with sbatch (or inside an allocation, under srun's environment)"}
MAIN_IP=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MAIN_IP
export PROCS_PER_NODE=${PROCS_PER_NODE:-${SLURM_GPUS_ON_NODE:-1}}
export MAIN_PORT=${MAIN_PORT:-29500}
export PYTHON=${PYTHON:-python}
if [ -n "${ACCELERATE_CONFIG:-}" ]; then
    export LAUNCH_MODE="--config_file $ACCELERATE_CONFIG"
else
    export LAUNCH_MODE="--multi_gpu --mixed_precision no --dynamo_backend no"
fi
echo "slurm_train: $MACHINES machine(s) x $PROCS_PER_NODE process(es), main $MAIN_IP:$MAIN_PORT, ${LAUNCH_MODE}"

# shellcheck disable=SC2016  # expanded by each task's shell, where SLURM_PROCID is the task's rank
srun --kill-on-bad-exit=1 bash -c '
    # shellcheck disable=SC2086  # LAUNCH_MODE is a list of options
    exec "$PYTHON" -m accelerate.commands.launch $LAUNCH_MODE \
        --num_machines "$MACHINES" --machine_rank "$SLURM_PROCID" --num_processes $((MACHINES * PROCS_PER_NODE)) \
        --main_process_ip "$MAIN_IP" --main_process_port "$MAIN_PORT" --same_network \
        -m hf_tlaser.training.cli "$@"
' slurm_train "$@"
