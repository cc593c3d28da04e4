#!/usr/bin/env bash
# The README's two commands in one script:
#   bash dev.sh lab    set up .venv, then open JupyterLab on the quickstart (127.0.0.1 only); a saved
#                      tutorial keeps its outputs, and git sees it stripped (the clean filter below)
#   bash dev.sh test   set up .venv, run ruff and mypy, then the whole test suite: on pytest-xdist workers,
#                      then the `alone` tests in one process (extra args go to pytest)
# Set-up is idempotent, so both commands work on a fresh clone and on a used one.
set -euo pipefail
cd "$(dirname "$0")"
what=${1:-}
shift || true
venv=${WORKBENCH_VENV:-.venv}

# test: the vLLM tests' own environment (scripts/vllm_env.sh: about 2 minutes once per machine, then linked
# from the user cache by every checkout) is set up in the background while .venv is set up and linted, and
# waited for before the tests; where it cannot be made (WORKBENCH_VLLM_SKIP=1, no index) those tests skip
# and say why
vllm_job=""
if [[ $what == test && ${WORKBENCH_VLLM_SKIP:-0} != 1 && -z ${WORKBENCH_VLLM_PYTHON:-} ]]; then
  vllm_found=$(mktemp)
  bash scripts/vllm_env.sh >"$vllm_found" 2>.venv-vllm.log </dev/null &
  vllm_job=$!
  trap 'wait "$vllm_job" 2>/dev/null; rm -f "$vllm_found"' EXIT  # a lint finding still leaves nothing running
fi

if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
  # a current pip: the bundled one (23.x on Python 3.11) resolves tests/test_install_resolves.py's sets 2-3x slower
  "$venv/bin/python" -m pip install --quiet --upgrade pip || echo "dev.sh: pip could not be upgraded; going on" >&2
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
  "$py" -m pip install --quiet --no-compile "${torch_args[@]}"
fi
# lab: the package, the bundled local tritonserver (local-server: nvidia-pytriton, which keeps numpy<2) and what
# the tutorials use; test: also the test tools and the optional paths
if [[ $what == test ]]; then extras="test,local-server"; else extras="transformers,local-server"; fi
# --no-compile: pip would byte-compile all ~22k files of the environment (about a minute of CPU), while
# Python compiles only the modules imported, once, on first use
"$py" -m pip install --quiet --no-compile -e ".[$extras]"
# the tutorials' git clean filter (.gitattributes; nbstripout keeping the # NBVAL_CHECK_OUTPUT cells), so
# Run All + save leaves `git status` clean while your file keeps its outputs
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  "$py" scripts/strip_notebooks.py --install
fi

case $what in
  lab)
    # the vLLM environment the app and notebook 09 serve LLMs from (.venv-vllm, scripts/vllm_env.sh: about
    # 2 minutes once, then reused), set up in the background so Lab opens at once; the app says while it
    # is being set up. WORKBENCH_VLLM_SKIP=1 leaves it out.
    if [[ ${WORKBENCH_VLLM_SKIP:-0} != 1 && -z ${WORKBENCH_VLLM_PYTHON:-} ]] && ! bash scripts/vllm_env.sh --ready >/dev/null; then
      echo "dev.sh: setting up the vLLM environment in the background (log: .venv-vllm.log)"
      nohup bash scripts/vllm_env.sh >.venv-vllm.log 2>&1 </dev/null &
    fi
    root=(); [[ $(id -u) == 0 ]] && root=(--allow-root)
    exec "$venv/bin/jupyter" lab --ip=127.0.0.1 "${root[@]}" --config=scripts/jupyter_server_config.py "$@"
    ;;
  test)
    # lint, format and types first (pyproject.toml configures them): a finding stops here, in the tool's words
    "$py" -m ruff check workbench conftest.py
    "$py" -m ruff format --check workbench conftest.py
    # mypy's cache outside the tree, as the bytecode below: a fresh clone re-checks only what changed (1 s, not 40)
    MYPY_CACHE_DIR=${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/workbench/mypy} "$py" -m mypy
    if [[ -n $vllm_job ]]; then
      if wait "$vllm_job"; then
        export WORKBENCH_VLLM_PYTHON=$(<"$vllm_found")
        grep -h "ready in" .venv-vllm.log >&2 || true  # its set-up time, when it was set up now
      else
        tail -n 5 .venv-vllm.log >&2
        echo "dev.sh: the vLLM environment could not be set up (log: .venv-vllm.log); the vLLM tests will skip" >&2
      fi
    fi
    # bytecode cached outside the tree: with PYTHONDONTWRITEBYTECODE set, each worker and each of the
    # suite's child Pythons (CLI runs, kernels, model stubs) compiles the workbench and its tests afresh
    unset PYTHONDONTWRITEBYTECODE
    export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/workbench/pycache}
    # two passes: everything but the `alone` tests on $WORKBENCH_TEST_WORKERS xdist workers (default 3,
    # grouped as conftest.py says), then the `alone` tests (timings, CPU shares) in one process with
    # nothing beside them; extra args go to both, a -m EXPR joined to each pass's mark. Each ends with
    # its slowest tests.
    marks="" args=()
    while (($#)); do
      case $1 in
        -m) marks="(${2:?-m needs an expression}) and "; shift 2 ;;
        -m?*) marks="(${1#-m}) and "; shift ;;
        *) args+=("$1"); shift ;;
      esac
    done
    status=0
    "$py" -m pytest -n "${WORKBENCH_TEST_WORKERS:-3}" -m "${marks}not alone" --durations=25 "${args[@]}" || status=$?
    "$py" -m pytest -n 0 -m "${marks}alone" --durations=25 "${args[@]}" || { rc=$?; [[ $rc == 5 ]] || status=$rc; }
    [[ $status == 5 ]] && status=0  # "no tests collected": the args named only tests of the other pass
    exit "$status"
    ;;
  *)
    echo "usage: bash dev.sh lab|test [args...]" >&2
    exit 2
    ;;
esac
