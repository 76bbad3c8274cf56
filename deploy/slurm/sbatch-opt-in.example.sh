#!/bin/bash
# Opt a training job in to TrainGuard: one line, no change to the application.
#SBATCH --job-name=llm-pretrain
#SBATCH --nodes=16
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=48:00:00
#SBATCH --output=%x-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --comment='{"trainguard":{"environment":"prod","mode":"observe"}}'
#
# --requeue          lets TrainGuard (and Slurm) requeue the job; --no-requeue opts out of recovery.
# --open-mode=append keeps earlier attempts' output in the same file (TrainGuard detects a truncated
#                    or rotated file either way, but appended logs keep the evidence).
# "mode":"observe"   recommendations only; "action" once the cluster allows it (operator guide).
#
# The application must resume from its own last checkpoint when restarted, e.g. Megatron's --load.

srun python pretrain_gpt.py --load "$CKPT_DIR" --save "$CKPT_DIR" --save-interval 500 "$@"
