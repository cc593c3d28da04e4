"""Does the served model give what the model gives in-process? The reference outputs and the check.

The check sends requests of several batch sizes at once (so dynamic batching merges them into one
`execute()` and the concatenate/split code is exercised) and compares each served output with the
eager output for the same request. ``eager_reference`` builds that eager model from a generated
model directory, as the sweep does for every point it checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workbench.compiler.artifact import ArtifactError, load_artifact, read_artifact
from workbench.generate.backends import backend_of_config
from workbench.generate.config import parameters_of, read_config
from workbench.refusals import WorkbenchError
from workbench.spec import ModelSpec
from workbench.system import has_neuron_device

Eager = Callable[[list[np.ndarray]], list[np.ndarray]]
# inputs(batch_size, seed=...) -> arrays in argument order; for models whose valid inputs are not
# any random tensor of the right dtype (token ids below the vocabulary size, 0/1 masks)
InputMaker = Callable[..., Sequence[np.ndarray]]


class CheckError(WorkbenchError, ValueError):
    """No reference can be built for a model; the message says why and what to pass instead."""


NO_ANSWER = "no answer"  # how a request the server never answered (a timeout) is reported


@dataclass
class OutputCheck:
    request: int
    batch_size: int
    output: str
    max_abs_diff: float
    ok: bool
    error: str = ""


@dataclass
class CheckResult:
    model: str
    rows: list[OutputCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    @property
    def max_abs_diff(self) -> float:
        return max((r.max_abs_diff for r in self.rows if not r.error), default=float("nan"))

    def summary(self) -> str:
        sizes = sorted({r.batch_size for r in self.rows})
        if self.ok:
            return (
                f"served outputs match eager outputs for {self.model!r}: "
                f"{len({r.request for r in self.rows})} concurrent requests, batch sizes {sizes}, "
                f"max abs diff {self.max_abs_diff:.3g}"
            )
        bad = [r for r in self.rows if not r.ok]
        first = bad[0] if bad else None
        if first is not None and all(r.error.startswith(NO_ANSWER) for r in bad):  # no answer is not a wrong answer
            return (
                f"FAILED for {self.model!r}: {len(bad)} of {len(self.rows)} requests got no answer; first: "
                f"request {first.request} (batch {first.batch_size}): {first.error}"
            )
        detail = (
            (
                f"request {first.request} (batch {first.batch_size}) output {first.output}: "
                f"{first.error or f'max abs diff {first.max_abs_diff:.3g}'}"
            )
            if first
            else "no outputs"
        )
        return f"MISMATCH for {self.model!r}: {len(bad)} of {len(self.rows)} outputs differ; first: {detail}"

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([r.__dict__ for r in self.rows])


def torch_eager(module) -> Eager:
    """Wrap a torch module (eager or TorchScript) as numpy-in, numpy-out in output-index order."""
    import torch

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        with torch.inference_mode():
            result = module(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays])
        if isinstance(result, torch.Tensor):
            result = [result]
        return [r.detach().cpu().numpy() for r in result]

    return run


def eager_reference(model_dir: str | Path) -> Eager:
    """In-process outputs for a generated model directory: its COMPILED_MODEL loaded on the CPU
    (a Neuron artifact's CPU twin when there is no Neuron device), or the module of a PyTorch-backend
    directory, run eagerly on numpy inputs."""
    model_dir = Path(model_dir)
    config = read_config(model_dir)
    module = backend_of_config(config).eager_module(model_dir)  # e.g. Triton's PyTorch backend's module
    if module is not None:
        return torch_eager(module)
    params = parameters_of(config)
    compiled = params.get("COMPILED_MODEL", "")
    if not compiled:
        raise CheckError(f"{model_dir}/config.pbtxt has no COMPILED_MODEL; pass reference= to check outputs")
    path = Path(compiled) if Path(compiled).is_absolute() else model_dir / compiled
    if params.get("WORKBENCH_FRAMEWORK", "pytorch") != "pytorch":
        raise CheckError(f"{model_dir}: only PyTorch models get an automatic reference; pass reference=")
    try:
        artifact = read_artifact(path)
    except ArtifactError as err:
        raise CheckError(f"{model_dir}: {err}; pass reference= (a function from inputs to outputs)") from None
    if not artifact.runs_on_cpu and artifact.cpu_artifact is not None and not has_neuron_device():
        artifact = artifact.cpu_artifact
    try:
        return torch_eager(load_artifact(artifact))
    except ArtifactError as err:
        raise CheckError(f"{model_dir}: cannot build a reference: {err}") from None


def connect(url: str, protocol: str = "grpc", options=None, timeout: float | None = None):
    """(tritonclient module, client, headers) for ``protocol``; the module builds that protocol's
    request objects. ``options``: a `ClientOptions` (TLS, headers) for a remote server;
    ``timeout`` (seconds): the HTTP client's network timeout (gRPC's is given per request)."""
    if protocol == "grpc":
        import tritonclient.grpc as module
    elif protocol == "http":
        import tritonclient.http as module
    else:
        raise ValueError(f"protocol must be 'grpc' or 'http', got {protocol!r}")
    kwargs = options.client_kwargs(protocol) if options is not None else {}
    if timeout is not None and protocol == "http":
        kwargs.update(network_timeout=timeout, connection_timeout=min(10.0, timeout))
    headers = dict(options.headers) if options is not None and options.headers else None
    return module, module.InferenceServerClient(url=url, **kwargs), headers


def infer(
    connection, model: str, spec: ModelSpec, arrays: Sequence[np.ndarray], timeout: float | None = None
) -> list[np.ndarray]:
    """One request: arrays in argument (``__i``) order in, outputs in output-index order out;
    ``timeout`` bounds a gRPC request (an HTTP client carries its own, see `connect`)."""
    module, client, headers = connection
    inputs = []
    for t, a in zip(spec.by_index("input"), arrays):
        item = module.InferInput(t.name, list(a.shape), t.dtype)
        item.set_data_from_numpy(a)
        inputs.append(item)
    outputs = [module.InferRequestedOutput(t.name) for t in spec.by_index("output")]
    if timeout is not None and module.__name__.endswith("http"):
        import gevent  # tritonclient's HTTP client runs on gevent; its timeout is per read only

        with gevent.Timeout(timeout, TimeoutError(f"{NO_ANSWER} within {timeout:g}s (--timeout)")):
            result = client.infer(model, inputs, outputs=outputs, headers=headers)
    else:
        bound = {"client_timeout": timeout} if timeout is not None else {}
        try:
            result = client.infer(model, inputs, outputs=outputs, headers=headers, **bound)
        except Exception as err:  # noqa: BLE001 - any client error: a missed deadline is said as one, the rest raised as they came
            if timeout is not None and "DEADLINE_EXCEEDED" in str(getattr(err, "status", lambda: "")()):
                raise TimeoutError(f"{NO_ANSWER} within {timeout:g}s (--timeout)") from None
            raise
    return [result.as_numpy(t.name) for t in spec.by_index("output")]


def check_served(
    url: str,
    model: str,
    spec: ModelSpec,
    eager: Eager,
    *,
    batch_sizes: Sequence[int] = (1, 2, 3, 4),
    protocol: str = "grpc",
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    batch_dim: bool = True,
    inputs: InputMaker | None = None,
    options=None,
    timeout: float | None = None,
) -> CheckResult:
    """Send one request per batch size, all at once, and compare each with ``eager`` on the same inputs.

    ``spec`` holds dims without the batch dim when ``batch_dim`` (max_batch_size > 0); otherwise the
    requests are sent with the spec's dims as they are, one request per entry of ``batch_sizes``
    replacing a leading -1. ``inputs(size, seed=...)`` replaces the spec's random inputs where a
    model needs valid ones (e.g. a zoo model's ``example_inputs``). ``options``: TLS and headers
    of a remote server (`workbench.server.ClientOptions`).
    """
    requests = []
    for i, size in enumerate(batch_sizes):
        if inputs is not None:
            arrays = [np.asarray(a) for a in inputs(size, seed=seed + i)]
        elif batch_dim:
            arrays = spec.example_inputs(batch_size=size, seed=seed + i)
        else:
            arrays = spec.example_inputs(seed=seed + i, variable_dim=size)
        requests.append(arrays)

    def send(arrays):
        connection = connect(url, protocol, options, timeout)
        try:
            return infer(connection, model, spec, arrays, timeout), ""
        except Exception as err:  # a failed request is a result to report, not a crash
            return None, str(err).strip() or type(err).__name__
        finally:
            connection[1].close()

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        served = list(pool.map(send, requests))

    result = CheckResult(model)
    names = [t.name for t in spec.by_index("output")]
    for i, (arrays, (outs, error)) in enumerate(zip(requests, served)):
        size = batch_sizes[i]
        if error:
            result.rows.append(OutputCheck(i, size, "*", float("nan"), False, error))
            continue
        expected = eager(arrays)
        for name, got, want in zip(names, outs, expected):
            if got.shape != want.shape:
                result.rows.append(
                    OutputCheck(i, size, name, float("nan"), False, f"shape {got.shape} != eager {want.shape}")
                )
                continue
            diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
            ok = bool(np.allclose(got, want, rtol=rtol, atol=atol))
            result.rows.append(OutputCheck(i, size, name, diff, ok))
    return result
