#!/usr/bin/env bash
# Makes AIPerf's own virtual environment for benchmarks/llm_vs_aiperf.py and prints its aiperf
# command. AIPerf pins its own transformers/tokenizers, so it stays out of the project's .venv.
# Usage: bash benchmarks/aiperf_env.sh   (AIPERF_VENV, default /work/aiperf-venv; AIPERF_VERSION, default 0.13.0)
set -euo pipefail
VENV=${AIPERF_VENV:-/work/aiperf-venv}
VERSION=${AIPERF_VERSION:-0.13.0}
if [ ! -x "$VENV/bin/aiperf" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "aiperf==$VERSION"
fi
echo "$VENV/bin/aiperf"
