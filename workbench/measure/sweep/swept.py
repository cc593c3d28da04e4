"""What a sweep is about and where it writes, checked before anything is loaded: the model and
its base config on the server, the in-process reference, the endpoint the engines reach, the
plan's variants it measures, the CPUs of its core range, and the run folder (a new run, or the
earlier one's rows when resuming, refused when what it measured changed).
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from workbench.coremap import CoreRange
from workbench.generate.config import ModelConfig, parameters_of, read_config
from workbench.measure.grid.plan import SweepError
from workbench.measure.grid.rows import PointRow
from workbench.measure.store.results import POINTS_FILE, RECORD_FILE, SCREENING_FILE, RunRecord, read_points
from workbench.measure.sweep.resume import unique_rows
from workbench.served_outputs import CheckError, Eager, eager_reference
from workbench.server.protocol import Server
from workbench.system import detect


def check_out_dir(out_dir: str | Path, resume: bool) -> bool:
    """Whether ``out_dir`` holds a run to resume; a run there without ``resume`` is refused, so
    nothing measured before is overwritten."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise SweepError(f"{out_dir} is a file, not a folder for the run")
    has_run = (out_dir / RECORD_FILE).exists() or (out_dir / POINTS_FILE).exists()
    if has_run and not resume:
        raise SweepError(
            f"{out_dir} already holds a sweep run; resume it (resume=True, --resume) or choose another folder"
        )
    return has_run


def config_digest(config: dict, files: Mapping[str, str] | None = None) -> str:
    """A short digest of a variant's config (Triton's JSON) and of the files it loads with it
    (``files``: an LLM variant's model.json, path -> text): what a row records it measured, so a
    row of another model.json under the same name is not taken for this variant's."""
    what: Any = config if not files else {"config": config, "files": dict(files)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def machine() -> dict:
    info = detect()
    return {
        "cpu_model": info.cpu_model,
        "cpu_count": info.cpu_count,
        "usable_cpus": info.usable_cpus,
        "neuron_devices": info.neuron_devices,
        "neuron_cores": info.neuron_cores,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def base_config(server: Server, model: str | Path) -> tuple[str, ModelConfig, Path | None]:
    """(name, base config, model directory or None) of the model to sweep; a directory is read from
    disk (the server is asked only for a model given by name)."""
    model_dir = Path(model) if Path(model).is_dir() else None
    if model_dir is None:
        name = str(model)
        try:
            return name, server.model_config(name, as_proto=True), None
        except Exception as err:  # noqa: BLE001 - whatever the client raises, the model is not there to sweep
            raise SweepError(
                f"model {name!r} is not loaded on the server ({err}); load it or give its directory"
            ) from None
    base = read_config(model_dir)
    return base.name or model_dir.name, base, model_dir


def check_in_repository(server: Server, name: str, model_dir: Path | None) -> None:
    """A model directory outside the repository of a server this process started is refused: the
    server would load its own copy of the model, not the one given."""
    repository = server.model_repository
    if model_dir is not None and repository is not None and model_dir.resolve().parent != Path(repository).resolve():
        raise SweepError(
            f"{model_dir} is not in the server's model repository {repository}; the server "
            f"would load its own {name!r}. Start the server on {model_dir.resolve().parent}"
        )


def reference_for(model_dir: Path | None) -> Eager:
    """The in-process reference every point's outputs are checked against: the directory's model."""
    if model_dir is None:
        raise SweepError(
            "outputs are checked at every point: pass reference= (inputs -> outputs) or give the model directory"
        )
    try:
        return eager_reference(model_dir)
    except CheckError as err:
        raise SweepError(str(err)) from None


def server_url(server: Server, protocol: str) -> str:
    try:
        return server.grpc_url if protocol == "grpc" else server.http_url
    except ValueError as err:  # a remote server given on the other protocol
        raise SweepError(str(err)) from None


def check_reachable_by_engine(server: Server) -> None:
    """The load generators reach a server in the clear and without headers: say so before anything loads."""
    options = server.options
    if options.ssl or options.headers:
        raise SweepError(
            f"the server at {server.name} needs TLS or headers, which the sweep's load generators "
            "do not send yet; measure it through a plain endpoint (e.g. from inside its network)"
        )


def range_cpus(core_range: CoreRange, base: ModelConfig) -> tuple[int, ...]:
    """The CPUs of the core range on the CPU target (on Neuron the range names NeuronCores)."""
    if parameters_of(base).get("WORKBENCH_TARGET", "cpu") != "cpu":
        return ()
    return tuple(range(core_range.start, core_range.end + 1))


def screened_rows(out_dir: Path, previous: RunRecord | None) -> list[PointRow]:
    """The screening rows a resumed search made before (error-free, one per point)."""
    path = out_dir / SCREENING_FILE
    if previous is None or not path.exists():
        return []
    return [PointRow.from_dict(row) for row in unique_rows(read_points(path)) if not row.get("error")]


class Labelled(Protocol):
    """A plan's variant as a sweep picks it: by its label (a tensor `Variant`, an LLM `LlmVariant`)."""

    @property
    def label(self) -> str: ...


V = TypeVar("V", bound=Labelled)


def chosen_variants(variants: list[V], labels: Collection[str] | None) -> list[V]:
    """The plan's variants named by ``labels`` (all when None); an unknown label is an error."""
    if labels is None:
        return variants
    known = {v.label for v in variants}
    unknown = [label for label in labels if label not in known]
    if unknown:
        raise SweepError(f"variant(s) {unknown} are not in the plan (its variants: {sorted(known)})")
    return [v for v in variants if v.label in set(labels)]
