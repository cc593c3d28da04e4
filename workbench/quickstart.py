"""The whole CPU path in one call: trace an example model, generate its Triton model directory,
serve it on a local tritonserver, and check served outputs against eager outputs.

`workbench quickstart` runs it headless; notebooks/01-quickstart.ipynb walks through the same steps
one cell at a time. It needs no Neuron hardware, so it is what a new user runs first.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workbench import zoo
from workbench.compiler import Artifact, compile_model
from workbench.coremap import CoreRange
from workbench.generate import GeneratedModel, GenerateSettings, render, write
from workbench.generate.repository import RepositoryError, WriteResult
from workbench.served_outputs import CheckResult, check_served
from workbench.server import TritonServer
from workbench.system import usable_cpu_ids
from workbench.tasks import check_cancel

Progress = Callable[[int, int, str], None]
STEPS = 5


@dataclass
class QuickstartResult:
    """Where everything went, and whether the served model matched."""

    workdir: Path
    artifact: Artifact
    generated: GeneratedModel
    written: WriteResult
    check: CheckResult
    server_version: str
    server_log: Path
    server: TritonServer | None = None  # still running when keep_server=True

    @property
    def model_repository(self) -> Path:
        return self.written.path.parent

    def summary(self) -> str:
        lines = [
            f"compiled model : {self.artifact.path}",
            f"model directory: {self.written.path}",
            f"tritonserver   : {self.server_version} (log {self.server_log if self.server is None else self.server.log_path})",
            self.check.summary(),
        ]
        if self.written.backup:
            lines.insert(2, f"previous directory kept as {self.written.backup}")
        if self.server is not None:
            lines.append(f"server running : http {self.server.http_url}, grpc {self.server.grpc_url}")
        return "\n".join(lines)


def quickstart_settings(
    artifact: Artifact, repository: Path, name: str, *, max_batch_size: int = 8, cores: int | None = None
) -> GenerateSettings:
    """CPU settings for a traced zoo model: dynamic batching on, one instance over this machine's cores."""
    cores = cores or len(usable_cpu_ids())
    return GenerateSettings(
        triton_model_dir=str(repository / name),
        compiled_model=str(artifact.path),
        copy_compiled_model=True,
        framework="pytorch",
        target="cpu",
        neuron_core_range=CoreRange(0, cores - 1),
        max_batch_size=max_batch_size,
        enable_dynamic_batching=True,
        max_queue_delay_microseconds=1000,
    )


def quickstart(
    workdir: str | os.PathLike = "workbench-quickstart",
    model: str = "add_sub",
    *,
    max_batch_size: int = 8,
    overwrite: bool = False,
    keep_server: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    log: Callable[[str], None] | None = None,
) -> QuickstartResult:
    """Trace ``model`` from the zoo, write ``workdir/model_repository/<model>``, serve it and check it.

    An existing model directory is refused unless ``overwrite`` (then it is kept as a backup). With
    ``keep_server`` the server is left running and returned (stop it with ``result.server.stop()``).
    """
    report = progress or (lambda done, total, message: None)
    workdir = Path(workdir).resolve()
    entry = zoo.get(model)
    repository = workdir / "model_repository"
    if (repository / model).exists() and not overwrite:  # refuse before anything is written
        raise RepositoryError(
            f"{repository / model} already exists; nothing was written. Pass --force "
            "(overwrite=True) to replace it: the old directory is kept as a backup"
        )

    report(0, STEPS, f"tracing {model} on the CPU")
    artifact = compile_model(
        entry.module,
        entry.example_inputs(2),
        "cpu",
        out_dir=workdir / "artifacts",
        name=model,
        overwrite=True,
        cancel=cancel,
        log=log,
    )
    check_cancel(cancel)

    report(1, STEPS, "generating the Triton model directory")
    generated = render(quickstart_settings(artifact, repository, model, max_batch_size=max_batch_size))
    written = write(generated, overwrite=overwrite)
    check_cancel(cancel)

    report(2, STEPS, "starting tritonserver")
    server = TritonServer(repository)
    try:
        server.start()
        check_cancel(cancel)
        report(3, STEPS, f"loading {model}")
        server.load(model)
        report(4, STEPS, "checking served outputs against eager outputs")
        sizes = tuple(range(1, max_batch_size + 1))
        result = check_served(server.grpc_url, model, generated.spec, entry.eager, batch_sizes=sizes)
        report(5, STEPS, result.summary())
        outcome = QuickstartResult(
            workdir,
            artifact,
            generated,
            written,
            result,
            server.version,
            workdir / "tritonserver.log",
            server if keep_server else None,
        )
    finally:
        if not keep_server:
            server.stop()
            # the server's own run folder goes away with it; keep its log with the rest of the quickstart
            (workdir / "tritonserver.log").write_text("\n".join(server.log_tail(2000)) + "\n")
    return outcome
