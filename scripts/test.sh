#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: lint, types, unit, workflow (time-skipping server),
# end-to-end on a real local Slurm cluster + Temporal dev server + Prometheus + sshd + Chromium.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAINGUARD_EXTRAS=${TRAINGUARD_EXTRAS:-dev,torch} bash scripts/bootstrap.sh
export PYTHONUNBUFFERED=1
echo "== ruff"; .venv/bin/ruff check .; .venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy trainguard workflows activities workers
# Two pytest-xdist workers, a test file each at a time (session fixtures - Slurm clusters, dev servers -
# per worker, on ports XDIST_PORT_STRIDE apart: tests/e2e/stack.py), longest files first (tests/conftest.py).
# TG_TEST_WORKERS=0 runs one process.
workers=${TG_TEST_WORKERS:-2}
case $workers in *[!0-9]*|'') echo "test.sh: bad TG_TEST_WORKERS '$workers'" >&2; exit 2 ;; esac
xdist=(); [ "$workers" -gt 0 ] && xdist=(-n "$workers" --dist loadfile --no-loadscope-reorder)  # order: tests/conftest.py
echo "== pytest (${workers} workers)"
.venv/bin/pytest -q -p no:cacheprovider --durations=25 "${xdist[@]}" "$@"
