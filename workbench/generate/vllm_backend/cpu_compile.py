"""Make a vLLM Neuron model directory's NEFFs on a CPU host: vLLM Neuron's CPU compilation.

The SDK documents it (`CPU_COMPILE_DOC`): ``VLLM_NEURON_CPU_COMPILE=1`` compiles the model's graphs
with the ``neuron_libtorch_graph_capture`` backend and does not execute them; no Neuron device is
needed. Its Requirements section: ``NEURON_PLATFORM_TARGET_OVERRIDE`` must name the target (no
hardware to detect it; valid values are the ``--target`` choices of ``neuronx-cc compile --help``),
and ``VLLM_NEURON_CPU_MODE`` must not be set with it. Inference cannot run in this mode. The NEFFs
land in the compilation cache, ``$VLLM_CACHE_ROOT/neuron/compile_cache/<hash>/`` (default
``~/.cache/vllm``), and with ``NEURON_LIBTORCH_REMOTE_CACHE`` also on that shared path
(`CACHE_DOC`); speculative decoding is not supported in the mode (Limitations). The engine must be
started with the same engine arguments as on the Trn host so the cache keys match, so the command
is built from the directory's own ``model.json``.

`cpu_compile_plan` checks a directory and returns the environment and command; it runs nothing
(vLLM Neuron is not installed here). ``workbench cpu-compile DIR``
prints them as shell lines.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workbench.files import read_text, strict_json
from workbench.generate.config import ConfigError, parameters_of, read_config
from workbench.generate.vllm_backend.engine_settings import VLLM_NEURON_TARGETS
from workbench.generate.vllm_backend.readback import MODEL_JSON_LIMIT, engine_args_file
from workbench.generate.vllm_backend.render import TARGET_PARAMETER
from workbench.refusals import WorkbenchError

__all__ = [
    "CACHE_DOC",
    "CPU_COMPILE",
    "CPU_COMPILE_DOC",
    "CPU_MODE",
    "REMOTE_CACHE",
    "TARGET_OVERRIDE",
    "CpuCompileError",
    "CpuCompilePlan",
    "cpu_compile_plan",
    "engine_cli_args",
]

_VN = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/vllm-neuron/docs/"
CPU_COMPILE_DOC = _VN + "design/compilation/cpu_compilation.html"  # SDK vllm-neuron/docs/design/compilation/
CACHE_DOC = _VN + "design/compilation/compilation_cache.html"  # "Cache Tiers", environment table
CPU_COMPILE = "VLLM_NEURON_CPU_COMPILE"
CPU_MODE = "VLLM_NEURON_CPU_MODE"
TARGET_OVERRIDE = "NEURON_PLATFORM_TARGET_OVERRIDE"
REMOTE_CACHE = "NEURON_LIBTORCH_REMOTE_CACHE"
CACHE_ROOT = "VLLM_CACHE_ROOT"
# The --target values neuronx-cc lists for each vLLM Neuron target (SDK neuronx-cc CLI reference
# :85-94 lists trn2; trn3 is NEURON_PLATFORM_TARGET_OVERRIDE's trn3|gen4, SDK nki/api/nki/__init__.py).
OVERRIDE_VALUES = {"trn2": "trn2", "trn3": "trn3"}
# The server vLLM Neuron's own CPU-compile example starts (SDK vllm-neuron/docs/model-dev/cpu-development.md §6)
SERVER = ("-m", "vllm.entrypoints.openai.api_server")


class CpuCompileError(WorkbenchError, ValueError):
    """A directory or environment the CPU compile refuses, said before anything runs."""


@dataclass(frozen=True)
class CpuCompilePlan:
    """What a CPU host runs to make ``model_dir``'s NEFFs: set ``environment``, unset ``unset``, run
    ``command``; the NEFFs go to ``cache_dir`` (and ``remote_cache`` when given)."""

    model_dir: Path
    target: str
    environment: dict[str, str]
    command: tuple[str, ...]
    cache_dir: str
    remote_cache: str | None = None
    unset: tuple[str, ...] = (CPU_MODE,)
    notes: tuple[str, ...] = field(default=())

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with this plan's variables set and the conflicting ones removed."""
        env = {k: v for k, v in base.items() if k not in self.unset}
        env.update(self.environment)
        return env

    def shell(self) -> str:
        """The plan as shell lines (what the command line prints)."""
        lines = [f"# {note}" for note in self.notes]
        lines += [f"unset {name}" for name in self.unset]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in self.environment.items()]
        lines.append(shlex.join(self.command))
        return "\n".join(lines) + "\n"


def engine_cli_args(args: Mapping[str, object]) -> list[str]:
    """model.json's engine arguments as vLLM's command-line flags (``--snake-case``: vLLM's
    EngineArgs.add_cli_args spelling): True is a bare flag, False/None are left out, dicts and lists
    go as JSON (how vLLM's CLI takes additional_config and the other mapping arguments)."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (dict, list)):
            out += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            out += [flag, str(value)]
    return out


def _target_of(model_dir: Path) -> str:
    try:
        params = parameters_of(read_config(model_dir / "config.pbtxt"))
    except (ConfigError, OSError, ValueError) as err:
        raise CpuCompileError(f"{model_dir}: config.pbtxt cannot be read: {err}") from None
    return params.get(TARGET_PARAMETER, "cpu")


def cpu_compile_plan(
    model_dir: str | os.PathLike,
    *,
    remote_cache: str | None = None,
    cache_root: str | None = None,
    python: str = "python3",
    environ: Mapping[str, str] | None = None,
) -> CpuCompilePlan:
    """Check a generated vLLM-backend directory and say how to make its NEFFs without a device.

    Refused, each as its source says: a target other than trn2/trn3 (vLLM Neuron's; Inf2/Trn1 serve
    through the NxD Inference plugin, for which no CPU compile is documented); ``VLLM_NEURON_CPU_MODE``
    set in ``environ`` (CPU_COMPILE_DOC, Requirements: "cannot be enabled together"); a
    ``NEURON_PLATFORM_TARGET_OVERRIDE`` in ``environ`` for another chip (it would compile NEFFs the
    Trn host cannot load); a ``speculative_config`` (CPU_COMPILE_DOC, Limitations)."""
    model_dir = Path(model_dir)
    environ = os.environ if environ is None else environ
    if not model_dir.is_dir():
        raise CpuCompileError(f"{model_dir}: no such model directory")
    target = _target_of(model_dir)
    if target not in VLLM_NEURON_TARGETS:
        raise CpuCompileError(
            f"{model_dir} is generated for {target}; vLLM Neuron's CPU compilation makes NEFFs for "
            f"{'/'.join(VLLM_NEURON_TARGETS)} only ({CPU_COMPILE_DOC})"
        )
    if environ.get(CPU_MODE, "0") not in ("", "0"):
        raise CpuCompileError(
            f"{CPU_MODE} is set: {CPU_COMPILE} and {CPU_MODE} cannot be enabled together "
            f"(CPU mode runs inference on the CPU, CPU compilation only compiles; {CPU_COMPILE_DOC})"
        )
    override = OVERRIDE_VALUES[target]
    given = environ.get(TARGET_OVERRIDE)
    if given and given != override:
        raise CpuCompileError(
            f"{TARGET_OVERRIDE}={given} is set but {model_dir.name} is for {target}: unset it or "
            f"set it to {override} (the NEFFs are compiled for the override's chip)"
        )
    try:
        path = engine_args_file(model_dir)
        args = strict_json(read_text(path, limit=MODEL_JSON_LIMIT))
    except (ConfigError, OSError, ValueError) as err:
        raise CpuCompileError(f"{model_dir}: the engine arguments cannot be read: {err}") from None
    if not isinstance(args, dict) or not args.get("model"):
        raise CpuCompileError(f'{path}: needs a JSON object with the model folder under "model"')
    if args.get("speculative_config"):
        raise CpuCompileError(
            f"{path}: speculative_config is set; speculative decoding is not supported in "
            f"vLLM Neuron's CPU compile mode ({CPU_COMPILE_DOC}, Limitations)"
        )
    env = {CPU_COMPILE: "1", TARGET_OVERRIDE: override}
    if cache_root:
        env[CACHE_ROOT] = os.path.abspath(cache_root)
    if remote_cache:
        env[REMOTE_CACHE] = os.path.abspath(remote_cache)
    root = env.get(CACHE_ROOT) or environ.get(CACHE_ROOT) or os.path.expanduser("~/.cache/vllm")
    notes = (
        (
            f"vLLM Neuron CPU compilation of {model_dir} for {target} ({CPU_COMPILE_DOC}); no inference runs "
            "in this mode"
        ),
        (
            f"NEFFs go to {root}/neuron/compile_cache/<hash>/ ({CACHE_DOC}); copy them to the Trn host's cache, "
            "or share the remote cache"
        ),
    )
    return CpuCompilePlan(
        model_dir=model_dir,
        target=target,
        environment=env,
        command=(python, *SERVER, *engine_cli_args(args)),
        cache_dir=os.path.join(root, "neuron", "compile_cache"),
        remote_cache=env.get(REMOTE_CACHE),
        notes=notes,
    )
