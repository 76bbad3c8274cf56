#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: lint, types, unit, workflow (time-skipping server),
# end-to-end on a real local Slurm cluster + Temporal dev server + Prometheus + sshd + Chromium.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAINGUARD_EXTRAS=${TRAINGUARD_EXTRAS:-dev,torch} bash scripts/bootstrap.sh
export PYTHONUNBUFFERED=1
echo "== ruff"; .venv/bin/ruff check .
echo "== mypy"; .venv/bin/mypy trainguard workflows activities workers
echo "== pytest"
.venv/bin/pytest -q -p no:cacheprovider --durations=25 "$@"
