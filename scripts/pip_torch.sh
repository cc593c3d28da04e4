#!/usr/bin/env bash
# Print, one per line, the pip arguments that install PyTorch's CPU build with the Python given as $1.
#
# Why: on x86_64 Linux PyPI's `torch` is the CUDA build (several GB of nvidia-* wheels); the workbench runs on
# the CPU build, which PyTorch publishes on its own wheel index with a `+cpu` local version. So, on x86_64 Linux:
#   1. if pip's own sources already provide torch==V+cpu (a machine whose pip config finds the wheel, like a
#      mirror or a wheel cache), use them and reach no other index;
#   2. else if PyTorch's CPU index ($WORKBENCH_TORCH_INDEX, default https://download.pytorch.org/whl/cpu) is
#      reachable, require torch==V+cpu from it;
#   3. else stop with a sentence saying what to do (docs/install.md: "behind a proxy").
# Elsewhere (macOS, aarch64 Linux) PyPI's torch already is a CPU build: plain torch==V.
# WORKBENCH_TORCH=V picks the version (a V with its own +label is used as given); WORKBENCH_TORCH_INDEX= (empty)
# accepts PyPI's default build on purpose.
set -euo pipefail
py=${1:?usage: pip_torch.sh PYTHON}
version=${WORKBENCH_TORCH:-2.13.0}
index=${WORKBENCH_TORCH_INDEX-https://download.pytorch.org/whl/cpu}

if [[ $(uname -s) != Linux || $(uname -m) != x86_64 || $version == *+* || -z $index ]]; then
  echo "torch==$version"
  exit 0
fi
want="torch==$version+cpu"
probe=("$py" -m pip install --dry-run --quiet --no-deps --ignore-installed)
if "${probe[@]}" "$want" >/dev/null 2>&1; then
  echo "$want"
elif "${probe[@]}" --retries 1 --timeout 20 --extra-index-url "$index" "$want" >/dev/null 2>&1; then
  echo "$want"
  echo "--extra-index-url"
  echo "$index"
else
  cat >&2 <<EOF
dev.sh: cannot reach PyTorch's CPU wheels ($want from $index), and pip's own sources do not have it.
  Behind a proxy: set HTTPS_PROXY (pip honours it), or WORKBENCH_TORCH_INDEX=<your mirror of $index>;
  or install the CPU wheel into $(dirname "$(dirname "$py")") yourself (dev.sh keeps a torch that imports);
  or WORKBENCH_TORCH_INDEX= bash dev.sh ... to take PyPI's default build (on x86_64 Linux the CUDA one, several GB).
EOF
  exit 1
fi
