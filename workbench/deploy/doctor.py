"""`workbench doctor`: check that this machine (a Neuron host, its container, or the CPU) can compile,
serve and reproduce a model, and print a short report to paste into a bug.

It reuses the steps users run (zoo -> compile -> generate -> a real tritonserver -> check_served),
on one tiny model per installed framework, on one free core, and compares the served outputs with
the CPU's. On a Neuron host it also reads ``neuron-ls --json-output`` for the devices, their cores
and the processes holding them (``neuron_processes``), so a busy device is named rather than
failing a load. What it cannot check here it lists as skipped, with the reason. It reports no
timing: a doctor run is not a measurement.
"""

from __future__ import annotations

import dataclasses
import platform
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.deploy.doctor_platform import platform_check
from workbench.deploy.doctor_vllm import vllm_checks
from workbench.system import (
    FRAMEWORK_TARGETS,
    TARGET_PACKAGES,
    MissingSDKError,
    SystemInfo,
    WrongSDKError,
    detect,
    neuroncore_ids,
    require_sdk,
    usable_cpu_ids,
)

__all__ = ["Check", "DoctorReport", "run_doctor", "FRAMEWORKS"]

FRAMEWORKS = ("pytorch", "tensorflow", "transformers_neuronx")
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | fail | skip | info
    detail: str


@dataclass
class DoctorReport:
    """Every check in the order run; ``ok`` when none failed."""

    checks: list[Check] = field(default_factory=list)
    system: SystemInfo | None = None

    @property
    def ok(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    def add(self, name: str, status: str, detail: str) -> Check:
        check = Check(name, status, detail)
        self.checks.append(check)
        return check

    def text(self) -> str:
        # start-up: doctor loads each framework's stack only for the check that needs it
        from workbench import __version__

        lines = [
            f"workbench doctor: workbench {__version__}, Python {platform.python_version()}, {platform.platform()}"
        ]
        lines += [f"[{c.status:>4}] {c.name}: {c.detail}" for c in self.checks]
        failed = sum(c.status == "fail" for c in self.checks)
        skipped = sum(c.status == "skip" for c in self.checks)
        lines.append(
            f"result: {'OK' if not failed else f'{failed} check(s) FAILED'}"
            + (f", {skipped} skipped" if skipped else "")
        )
        return "\n".join(lines)


def _held(record: Mapping[str, Any]) -> list[str]:
    return [f"pid {p.get('pid')} ({p.get('command', '?')})" for p in record.get("neuron_processes") or []]


def _device_checks(report: DoctorReport, system: SystemInfo) -> int | None:
    """Report devices, cores and holders; return the first core of a device nobody holds."""
    if not system.has_device:
        report.add("neuron devices", "skip", "no Neuron device or driver on this machine: the CPU checks run instead")
        return None
    cores = "unknown" if system.neuron_cores is None else system.neuron_cores
    report.add(
        "neuron devices",
        "ok",
        f"{len(system.neuron_devices)} device node(s), {cores} NeuronCore(s) "
        f"({system.cores_source}), instance type {system.instance_type or 'unknown'}",
    )
    records = system.device_records
    if not records:
        report.add(
            "neuron-ls",
            "fail",
            "neuron-ls --json-output is missing or failed: install aws-neuronx-tools "
            "(the host recipe does); which core is free cannot be told",
        )
        return None
    free: int | None = None
    # neuroncore_ids exists from tools 2.25; older tools give nc_count only (system.neuroncore_ids)
    for index, (record, ids) in enumerate(zip(records, neuroncore_ids(records))):
        device = record.get("neuron_device", index)
        lnc = record.get("logical_neuroncore_config")
        holders = _held(record)
        what = f"cores {ids}" + (f" at LNC={lnc}" if lnc else "")
        report.add(f"device {device}", "info", f"{what}, held by {', '.join(holders)}" if holders else f"{what}, free")
        if not holders and ids and free is None:
            free = int(ids[0])
    if free is None:
        report.add(
            "free core",
            "fail",
            "every Neuron device is held by another process (see above): stop it, "
            "or the serve checks would fail to claim a core",
        )
    return free


def _sdk_key(framework: str, target: str) -> str | None:
    """`workbench.system.TARGET_PACKAGES` key of a framework's Neuron SDK for ``target``; None when
    the framework has none for it (TensorFlow or transformers-neuronx on Trn2)."""
    key = {"pytorch": target, "tensorflow": f"tensorflow-{target}"}.get(framework)
    if framework == "transformers_neuronx" and target in FRAMEWORK_TARGETS[framework]:
        key = "transformers_neuronx"
    return key if key in TARGET_PACKAGES else None


def _plan(report: DoctorReport, system: SystemInfo, frameworks: tuple[str, ...]) -> tuple[str, list[str]]:
    """The target to check and the frameworks whose SDK is installed for it (the others skipped)."""
    target = system.default_target if system.has_device else "cpu"
    if system.has_device and target == "cpu":
        report.add(
            "target",
            "fail",
            "a Neuron device is present but neither the instance family nor an installed "
            "SDK says which target it is; pass --instance-type",
        )
        return target, []
    report.add("target", "info", target + ("" if target != "cpu" else " (no Neuron device)"))
    present = {k: v for k, v in system.packages.items() if v}
    report.add("packages", "info", ", ".join(f"{k} {v}" for k, v in present.items()) or "none of the SDK packages")
    for note in system.notes:
        report.add("packages", "fail" if "placeholder" in note else "info", note)
    runnable = []
    for framework in frameworks:
        if target == "cpu":
            if framework == "transformers_neuronx":
                report.add(
                    framework,
                    "skip",
                    "transformers-neuronx serves only on "
                    + "/".join(t for t in FRAMEWORK_TARGETS[framework] if t != "cpu")
                    + " hosts",
                )
            elif framework == "tensorflow" and not (present.get("tensorflow") or present.get("tensorflow-cpu")):
                report.add(
                    framework, "skip", "TensorFlow is not installed (pip install 'triton-neuron-workbench[tensorflow]')"
                )
            else:
                runnable.append(framework)
            continue
        key = _sdk_key(framework, target)
        if framework == "transformers_neuronx":
            report.add(framework, "skip", "the doctor does not check transformers-neuronx yet (notebook 05 does)")
            continue
        try:
            if key is None:
                raise MissingSDKError(target, [framework], f"{framework} has no Neuron SDK for {target}")
            require_sdk(key, system.packages)
        except WrongSDKError as err:  # e.g. TorchNeuron on an inf2 host: installed, but the wrong library
            report.add(framework, "fail", f"wrong SDK for {target}: {err}")
            continue
        except (MissingSDKError, ValueError) as err:
            report.add(framework, "skip", f"not installed for {target}: {err}")
            continue
        runnable.append(framework)
    return target, runnable


@dataclass
class _Prepared:
    framework: str
    generated: Any
    eager: Callable
    batch_sizes: tuple[int, ...]


def _prepare(
    framework: str,
    target: str,
    core: int,
    workdir: Path,
    model_files: Mapping[str, Path],
    isolate: bool,
    cancel: Any,
    log: Callable[[str], None] | None,
) -> _Prepared:
    """Compile the framework's tiny model for ``target`` and write its model directory."""
    # start-up: doctor loads each framework's stack only for the check that needs it
    from workbench import zoo
    from workbench.coremap import CoreRange
    from workbench.generate import GenerateSettings, render, write

    name = f"doctor_{framework}"
    artifacts = workdir / "artifacts"
    if framework == "pytorch":
        from workbench.compiler import compile_model

        entry = zoo.get("add_sub")
        artifact = compile_model(
            entry.module,
            entry.example_inputs(2),
            target,
            out_dir=artifacts,
            name=name,
            isolate=isolate,
            cancel=cancel,
            log=log,
        )
        eager = entry.eager
    else:
        from workbench.compiler.tensorflow import compile_saved_model, saved_model_reference, tiny_saved_model

        source = tiny_saved_model(artifacts / f"{name}.source.savedmodel")
        artifact = compile_saved_model(
            source, target, out_dir=artifacts, name=name, isolate=isolate, cancel=cancel, log=log
        )
        eager = None
    settings = GenerateSettings(
        triton_model_dir=str(workdir / "model_repository" / name),
        compiled_model=str(artifact.path),
        copy_compiled_model=True,
        framework=framework,
        target=target,
        neuron_core_range=CoreRange(core, core),
        max_batch_size=4,
        enable_dynamic_batching=True,
        max_queue_delay_microseconds=1000,
    )
    generated = render(settings)
    if model_files:
        generated = dataclasses.replace(generated, files={**generated.files, **model_files})
    write(generated)
    if eager is None:
        eager = saved_model_reference(source, generated.spec)
    return _Prepared(framework, generated, eager, (1, 2, 3, 4))


def run_doctor(
    workdir: str | Path | None = None,
    *,
    instance_type: str | None = None,
    frameworks: tuple[str, ...] = FRAMEWORKS,
    dev_dir: str | Path = "/dev",
    proc_devices: str | Path = "/proc/devices",
    model_files: Mapping[str, Path] | None = None,
    server_env: Mapping[str, str] | None = None,
    isolate: bool = True,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    log: Callable[[str], None] | None = None,
) -> DoctorReport:
    """Run every check; compile, generate and serve under ``workdir/<timestamp>/`` (a temporary
    folder, removed afterwards, when None). ``model_files`` are added to each model directory and
    ``server_env`` to the server's environment (what a test uses to let the stub import FAKE SDKs)."""
    # start-up: doctor loads each framework's stack only for the check that needs it
    from workbench.tasks import check_cancel

    unknown = [f for f in frameworks if f not in FRAMEWORKS]
    if unknown:
        raise ValueError(f"unknown framework(s) {', '.join(unknown)}; use {', '.join(FRAMEWORKS)}")
    report_progress = progress or (lambda done, total, message: None)
    report = DoctorReport()
    system = report.system = detect(instance_type, dev_dir=dev_dir, proc_devices=proc_devices)
    report.add("machine", "info", f"{system.cpu_model}, {system.usable_cpus} of {system.cpu_count} CPUs usable")
    platform_check(report, system.packages)  # OS and Python against what the installed SDK documents
    vllm_checks(report)  # LLM serving: vLLM / vllm-neuron / NxDI, here and in $WORKBENCH_VLLM_PYTHON
    free_core = _device_checks(report, system)
    target, runnable = _plan(report, system, tuple(frameworks))
    if target != "cpu" and free_core is None:
        for framework in runnable:
            report.add(framework, "skip", "no free NeuronCore to serve on (see the device checks)")
        return report
    core = free_core if target != "cpu" else min(usable_cpu_ids())
    if not runnable:
        return report
    with tempfile.TemporaryDirectory(prefix="workbench-doctor-") as scratch:
        base = Path(scratch) if workdir is None else _fresh_folder(Path(workdir).resolve())
        _serve_and_check(
            report,
            runnable,
            target,
            core,
            base,
            dict(model_files or {}),
            dict(server_env or {}),
            isolate,
            report_progress,
            cancel,
            log,
            check_cancel,
        )
    return report


def _fresh_folder(parent: Path) -> Path:
    """``parent/<timestamp>[-n]``, made new: a doctor run never writes into an earlier one's files."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        folder = parent / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent}: no free folder name for {stamp}")


def _serve_and_check(
    report, runnable, target, core, base, model_files, server_env, isolate, progress, cancel, log, check_cancel
) -> None:
    # start-up: doctor loads each framework's stack only for the check that needs it
    from workbench.served_outputs import check_served
    from workbench.server import ServerError, TritonNotFoundError, TritonServer

    total = 2 * len(runnable) + 1
    prepared: list[_Prepared] = []
    for i, framework in enumerate(runnable):
        progress(i, total, f"{framework}: compiling and generating for {target} on core {core}")
        check_cancel(cancel)
        try:
            prepared.append(_prepare(framework, target, core, base, model_files, isolate, cancel, log))
        except Exception as err:  # a broken step is the finding, reported with its message
            report.add(f"{framework} compile+generate", "fail", f"{type(err).__name__}: {err}")
    if not prepared:
        return
    progress(len(runnable), total, "starting tritonserver")
    server = TritonServer(base / "model_repository", env=server_env)
    try:
        server.start()
    except (TritonNotFoundError, ServerError) as err:
        for item in prepared:
            report.add(f"{item.framework} serve", "skip" if isinstance(err, TritonNotFoundError) else "fail", str(err))
        return
    try:
        report.add("tritonserver", "ok", f"{server.version} ({server.install.source})")
        for i, item in enumerate(prepared):
            check_cancel(cancel)
            name = item.generated.config.name
            progress(len(runnable) + 1 + i, total, f"{item.framework}: serving {name} and checking against the CPU")
            try:
                server.load(name)
                result = check_served(
                    server.grpc_url, name, item.generated.spec, item.eager, batch_sizes=item.batch_sizes
                )
            except Exception as err:  # noqa: BLE001 - each failure is a row of the report, the next framework still runs
                tail = " | ".join(server.log_tail(5))
                report.add(f"{item.framework} serve+check", "fail", f"{type(err).__name__}: {err} (log: {tail})")
                continue
            where = f"{target} core {core}"
            report.add(f"{item.framework} serve+check", "ok" if result.ok else "fail", f"{where}: {result.summary()}")
    finally:
        server.stop()
    progress(total, total, "done")
