#!/usr/bin/env bash
# The README's two commands in one script:
#   bash dev.sh lab    set up .venv, then open JupyterLab on the quickstart (127.0.0.1 only); saving a
#                      tutorial strips its outputs (scripts/jupyter_server_config.py), so git stays clean
#   bash dev.sh test   set up .venv, run ruff and mypy, then the whole test suite on $WORKBENCH_TEST_WORKERS (default 3)
#                      pytest-xdist workers, grouped as conftest.py says, ending with the 25 slowest
#                      tests (extra args go to pytest; -n 0 runs it in one process)
# Set-up is idempotent, so both commands work on a fresh clone and on a used one.
set -euo pipefail
cd "$(dirname "$0")"
what=${1:-}
shift || true
venv=${WORKBENCH_VENV:-.venv}

if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
py=$venv/bin/python
# torch first, as PyTorch's CPU build: a bare "torch" requirement would let pip pick PyPI's multi-GB CUDA
# wheel on x86_64 Linux. scripts/pip_torch.sh says how (pip's own sources, else PyTorch's CPU index, else a
# sentence on what to do); WORKBENCH_TORCH=<version> and WORKBENCH_TORCH_INDEX=<url> override.
if ! "$py" -c "import torch" 2>/dev/null; then
  mapfile -t torch_args < <(bash scripts/pip_torch.sh "$py"; echo "status=$?")
  [[ ${torch_args[-1]} == status=0 ]] || exit 1
  unset 'torch_args[-1]'
  echo "dev.sh: pip install ${torch_args[*]}"
  "$py" -m pip install --quiet "${torch_args[@]}"
fi
# lab: the package and what the tutorials use; test: also the test tools and the optional paths
if [[ $what == test ]]; then extras="test"; else extras="transformers"; fi
"$py" -m pip install --quiet -e ".[$extras]"

case $what in
  lab)
    root=(); [[ $(id -u) == 0 ]] && root=(--allow-root)
    exec "$venv/bin/jupyter" lab --ip=127.0.0.1 "${root[@]}" --config=scripts/jupyter_server_config.py "$@"
    ;;
  test)
    # lint, format and types first (pyproject.toml configures them): a finding stops here, in the tool's words
    "$py" -m ruff check workbench conftest.py
    "$py" -m ruff format --check workbench conftest.py
    "$py" -m mypy
    # the vLLM tests' own environment (scripts/vllm_env.sh: idempotent, prints its set-up time);
    # where it cannot be made (WORKBENCH_VLLM_SKIP=1, no index) those tests skip and say why
    if [[ ${WORKBENCH_VLLM_SKIP:-0} != 1 && -z ${WORKBENCH_VLLM_PYTHON:-} ]]; then
      if vllm_py=$(bash scripts/vllm_env.sh); then
        export WORKBENCH_VLLM_PYTHON=$vllm_py
      else
        echo "dev.sh: the vLLM environment could not be set up; the vLLM tests will skip" >&2
      fi
    fi
    # bytecode cached outside the tree: with PYTHONDONTWRITEBYTECODE set, each worker and each of the
    # suite's child Pythons (CLI runs, kernels, model stubs) compiles the workbench and its tests afresh
    unset PYTHONDONTWRITEBYTECODE
    export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/workbench/pycache}
    # three workers on two cores: most tests wait on servers, engine loads and kernels, not the CPU
    exec "$py" -m pytest -n "${WORKBENCH_TEST_WORKERS:-3}" --durations=25 "$@"
    ;;
  *)
    echo "usage: bash dev.sh lab|test [args...]" >&2
    exit 2
    ;;
esac
