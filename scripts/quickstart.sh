#!/usr/bin/env bash
# The local quick start: a real 4-node Slurm cluster, the Temporal dev server (Web UI), the TrainGuard
# worker and API/console, SQLite audit — then a demo training job that fails on one node and is recovered.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/trainguard quickstart "$@"
