"""Triton's rules for the config fields users tune (`workbench.generate.options`), checked before writing.

From core's model_config_utils.cc ``ValidateModelConfig`` (the dynamic batcher's priorities, queue
policies and preserve_ordering; the response cache with decoupled models) and
backend_model_instance.cc ``GenerateWarmupData`` (every warm-up dim given, the data chosen, the file
present), plus what the generated model.py needs (no GPU kind, no decoupled responses). A broken
value is named here, with its flag, instead of failing the load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.generate.config import PRESERVE_ORDERING_WITH_CACHE
from workbench.generate.options import KINDS, QueuePolicy
from workbench.limits import field_problem
from workbench.spec import ModelSpec, SpecError, parse_dtype

__all__ = ["problems", "warnings"]

TIMEOUT_ACTIONS = ("REJECT", "DELAY")
WARMUP_DATA = ("zero", "random", "file")
# Triton runs every warm-up sample ``count`` times on every instance before the model is READY, and
# the load blocks meanwhile: past this many runs a warm-up is a hang, not a warm-up (a Neuron
# model at ~10 ms a run already takes over a minute and a half per instance).
WARMUP_COUNT_LIMIT = 10_000


def _policy_problems(label: str, policy: QueuePolicy) -> list[str]:
    problems = []
    if policy.timeout_action not in TIMEOUT_ACTIONS:
        problems.append(f"{label} timeout_action {policy.timeout_action!r} is not one of {', '.join(TIMEOUT_ACTIONS)}")
    if policy.default_timeout_microseconds < 0:
        problems.append(f"{label} default_timeout_microseconds {policy.default_timeout_microseconds} is negative")
    if policy.max_queue_size < 0:
        problems.append(f"{label} max_queue_size {policy.max_queue_size} is negative (0 means unbounded)")
    for name in ("default_timeout_microseconds", "max_queue_size"):
        problem = field_problem(getattr(policy, name), f"{label} {name}", "ModelQueuePolicy", name)
        if problem:
            problems.append(problem)
    return problems


def _batcher_problems(settings: Any) -> list[str]:
    """model_config_utils.cc ValidateModelConfig, the dynamic_batching part."""
    tuned = [
        flag
        for flag, on in (
            ("--preserve-ordering", settings.preserve_ordering),
            ("--priority-levels", settings.priority_levels),
            ("--default-priority-level", settings.default_priority_level),
            ("--default-queue-policy", settings.default_queue_policy is not None),
            ("--priority-queue-policy", settings.priority_queue_policy),
        )
        if on
    ]
    if not settings.enable_dynamic_batching:
        return [f"{' and '.join(tuned)} configure the dynamic batcher: add --enable_dynamic_batching"] if tuned else []
    problems = []
    levels = settings.priority_levels
    if levels < 0:
        problems.append(f"--priority-levels {levels} is negative")
    if levels > 0 and not 1 <= settings.default_priority_level <= levels:
        problems.append(
            f"--default-priority-level {settings.default_priority_level} must be in 1..{levels} with "
            f"--priority-levels {levels} (Triton refuses the load otherwise; 1 is the highest priority)"
        )
    if levels == 0 and settings.default_priority_level:
        problems.append(f"--default-priority-level {settings.default_priority_level} needs --priority-levels")
    for level in settings.priority_queue_policy:
        if not isinstance(level, int) or isinstance(level, bool):
            problems.append(f"--priority-queue-policy level {level!r} must be a whole number")
        elif not 1 <= level <= levels:
            problems.append(
                f"--priority-queue-policy level {level} must be in 1..{levels} (the --priority-levels)"
                if levels
                else f"--priority-queue-policy level {level} needs --priority-levels"
            )
    policies = {"--default-queue-policy": settings.default_queue_policy} if settings.default_queue_policy else {}
    policies.update({f"--priority-queue-policy {level}": p for level, p in settings.priority_queue_policy.items()})
    for label, policy in policies.items():
        problems += _policy_problems(label, policy)
    if settings.preserve_ordering:
        if levels > 1:
            problems.append(
                f"--preserve-ordering allows one priority level only, not --priority-levels {levels} "
                "(Triton: \"Only one priority level is allowed when 'preserve_ordering' is true\")"
            )
        for label, policy in policies.items():
            if policy.timeout_action == "DELAY" and policy.default_timeout_microseconds:
                problems.append(f"{label}: timeout_action DELAY with a timeout cannot be used with --preserve-ordering")
        if settings.response_cache:
            problems.append(
                PRESERVE_ORDERING_WITH_CACHE.format(ordering="--preserve-ordering", cache="--response-cache")
            )
    return problems


def _warmup_problems(settings: Any, spec: ModelSpec, files: set[str]) -> list[str]:
    """backend_model_instance.cc GenerateWarmupData: every dim given, data chosen, the file present."""
    problems: list[str] = []
    by_name = {t.name: t for t in spec.inputs}
    seen: set[str] = set()
    for warmup in settings.model_warmup:
        label = f"warm-up sample {warmup.name!r}"
        if not warmup.name:
            problems.append("a warm-up sample has no name")
        elif warmup.name in seen:
            problems.append(f"{label}: duplicate name")
        seen.add(warmup.name)
        out_of_range = [
            p
            for p in (
                field_problem(getattr(warmup, name), f"{label}: {name}", "ModelWarmup", name)
                for name in ("batch_size", "count")
            )
            if p
        ]
        problems += out_of_range
        if out_of_range:
            continue
        if warmup.batch_size < 1:
            problems.append(f"{label}: batch_size {warmup.batch_size} must be at least 1 (Triton skips 0)")
        if warmup.count < 0:
            problems.append(f"{label}: count {warmup.count} is negative")
        if WARMUP_COUNT_LIMIT < warmup.count:
            problems.append(
                f"{label}: count {warmup.count} is past {WARMUP_COUNT_LIMIT}: Triton runs it on every "
                "instance before the model is READY and the load blocks meanwhile"
            )
        mbs = settings.max_batch_size
        if isinstance(mbs, int) and 0 < mbs < warmup.batch_size:
            problems.append(
                f"{label}: batch_size {warmup.batch_size} is past --max_batch_size {mbs} (Triton refuses the load)"
            )
        if warmup.inputs is None:
            if warmup.data not in ("zero", "random"):
                problems.append(f"{label}: data {warmup.data!r} must be zero or random")
            continue
        required = [n for n in by_name if n not in settings.optional_inputs]
        missing = [n for n in required if n not in warmup.inputs]
        if missing:
            problems.append(f"{label}: input(s) {', '.join(missing)} missing (every required input needs data)")
        for name, item in warmup.inputs.items():
            where = f"{label} input {name!r}"
            tensor = by_name.get(name)
            if tensor is None:
                problems.append(f"{where} is not a model input ({', '.join(by_name)})")
                continue
            try:
                dtype = parse_dtype(item.data_type)
            except SpecError:
                dtype = None
            if dtype != tensor.dtype:
                problems.append(f"{where}: data_type {item.data_type} differs from the input's {tensor.dtype}")
            dims = list(item.dims)
            if any(d < 1 for d in dims):
                problems.append(f"{where}: dims {dims} must all be given (no -1): Triton builds the sample from them")
            elif len(dims) != len(tensor.dims) or any(c != -1 and c != d for c, d in zip(tensor.dims, dims)):
                problems.append(
                    f"{where}: dims {dims} do not fit the input's {list(tensor.dims)} (the load would fail)"
                )
            if item.data not in WARMUP_DATA:
                problems.append(f"{where}: data {item.data!r} is not one of {', '.join(WARMUP_DATA)}")
            elif item.data == "file" and f"warmup/{item.input_data_file}" not in files:
                problems.append(
                    f"{where}: warmup/{item.input_data_file} is not in the model directory "
                    "(Triton reads warm-up files from <model>/warmup/)"
                )
    return problems


def problems(settings: Any, spec: ModelSpec | None, files: set[str]) -> list[str]:
    """Every problem with the tuned fields of ``settings``; ``files`` are the model directory's files
    after the write (relative paths), for the warm-up data files and the versions a policy names."""
    found = _batcher_problems(settings)
    if settings.instance_group_kind not in KINDS:
        found.append(f"--instance-group-kind {settings.instance_group_kind!r} is not one of {', '.join(KINDS)}")
    if settings.instance_group_name and not settings.instance_group_name.strip():
        found.append("--instance-group-name is blank")
    limiter = settings.rate_limiter
    if limiter is not None:
        names = [r.name for r in limiter.resources]
        for resource in limiter.resources:
            if not resource.name.strip():
                found.append("rate limiter resource with an empty name")
            if resource.count < 0:
                found.append(f"rate limiter resource {resource.name!r} count {resource.count} is negative")
            else:
                found += filter(
                    None,
                    [
                        field_problem(
                            resource.count,
                            f"--rate-limiter-resource {resource.name} count",
                            "ModelRateLimiter.Resource",
                            "count",
                        )
                    ],
                )
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            found.append(f"rate limiter resource(s) {', '.join(duplicates)} given twice")
        if limiter.priority < 0:
            found.append(f"--rate-limiter-priority {limiter.priority} is negative")
        else:
            found += filter(
                None, [field_problem(limiter.priority, "--rate-limiter-priority", "ModelRateLimiter", "priority")]
            )
    if spec is not None:
        inputs = [t.name for t in spec.inputs]
        unknown = [n for n in settings.optional_inputs if n not in inputs]
        if unknown:
            found.append(f"--optional-input {', '.join(unknown)}: not a model input ({', '.join(inputs)})")
        if inputs and set(inputs) <= set(settings.optional_inputs):
            found.append("every input is optional: a request with no inputs at all would reach the model")
        found += _warmup_problems(settings, spec, files)
    if settings.decoupled and settings.model_py is None:
        found.append(
            "--decoupled: the generated model.py answers from execute(); a decoupled model needs a model.py "
            "that sends its responses through response senders"
        )
    if settings.decoupled and settings.response_cache:
        found.append("--response-cache cannot be used with a decoupled model (Triton refuses the load)")
    policy = settings.version_policy
    if policy is not None:
        versions = {int(p.split("/", 1)[0]) for p in files if p.split("/", 1)[0].isdigit() and "/" in p}
        if policy.kind not in ("latest", "all", "specific"):
            found.append(f"version policy {policy.kind!r} is not latest, all or specific")
        elif policy.kind == "latest" and policy.num_versions < 1:
            found.append(f"--version-policy latest:{policy.num_versions} must keep at least 1 version")
        elif policy.kind == "specific":
            if not policy.versions or any(v < 1 for v in policy.versions):
                found.append(f"--version-policy {policy}: versions start at 1")
            elif settings.model_version not in policy.versions:
                found.append(
                    f"--version-policy {policy} does not serve --model_version {settings.model_version}, "
                    "the version written"
                )
            missing = sorted(v for v in policy.versions if v >= 1 and v not in versions)
            if missing and settings.model_version in policy.versions:
                found.append(
                    f"--version-policy {policy}: no version folder {', '.join(map(str, missing))} in the "
                    "model directory"
                )
    return found


def warnings(settings: Any) -> list[str]:
    found = []
    if settings.rate_limiter is not None:
        found.append(
            "the rate limiter applies only when tritonserver runs with --rate-limit=execution_count "
            "(TritonServer(extra_args=['--rate-limit=execution_count']))"
        )
    where = str(Path(str(settings.triton_model_dir)).expanduser().absolute())
    if not where.isascii():
        # seen on tritonserver 2.51: the stub's embedded Python fails with UnicodeEncodeError ('ascii'
        # codec) on such a path, whatever the server's LC_ALL/PYTHONUTF8
        found.append(
            f"{where} is not an ASCII path: Triton's Python backend (model.py, the PyTorch 2 runtime, "
            "the LibTorch twin) fails to load a model from it (UnicodeEncodeError in the backend stub); "
            "serve it from an ASCII path"
        )
    return found
