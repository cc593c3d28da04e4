"""The `workbench generate` command: gen_triton_model.py's flags, spelled and meant as upstream, plus ours.

Exit status 0 written, unchanged or dry run; 2 bad settings, an existing directory that would
change without ``--force`` (the changes are printed; nothing written), or a file system that
refuses the write (read-only, not a directory, another device; nothing written); 1 any other refusal.
Loaded through `workbench.cli.SUBCOMMANDS` only when the command is ``generate``, and it imports
nothing heavy (no torch), so ``workbench generate --help`` answers at once.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from dataclasses import fields
from typing import Any, NoReturn

from workbench.generate import options
from workbench.generate.backends import BACKENDS, render, write
from workbench.generate.config import FRAMEWORKS, TARGETS
from workbench.generate.python_backend.upstream import UPSTREAM_DEFAULT_TARGET
from workbench.generate.pytorch_backend.backend import PYTORCH
from workbench.generate.pytorch_backend.layouts import PYTORCH2_PARAMETERS, TORCHSCRIPT_PARAMETERS
from workbench.generate.repository import FileSystemRefusal, RepositoryError
from workbench.generate.settings import TNX_AMPS, GenerateError, GenerateSettings, default_target
from workbench.generate.vllm_backend.flags import add_vllm_flags, vllm_values

__all__ = ["register", "run_cli", "settings_from_args"]


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Usage errors as one line and exit status 2 (argparse prints the whole usage block)."""
    prog = parser.prog

    def error(message: str) -> NoReturn:
        print(f"{prog}: error: {message} (see {prog} --help)", file=sys.stderr)
        raise SystemExit(2)

    def parse_known_args(args=None, namespace=None):
        parsed, extras = argparse.ArgumentParser.parse_known_args(parser, args, namespace)
        if extras:
            error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    parser.error = error  # type: ignore[method-assign]
    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def _typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from an options parser: its message becomes the usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except options.OptionError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = parse.__name__.removeprefix("parse_").replace("_", " ")
    return convert


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise options.OptionError(f"{text!r}: expected KEY=VALUE")
    return key.strip(), value


def _variant(text: str) -> tuple[str, str]:
    name, sep, flags = text.partition("=")
    if not sep or not name.strip():
        raise options.OptionError(f"{text!r}: expected NAME='FLAGS', e.g. cpu='--target cpu --neuron_core_range 0:1'")
    return name.strip(), flags


def _add_setting_flags(parser: argparse.ArgumentParser, *, variant: bool) -> None:
    """The flags that describe a model's config; a ``--variant`` takes the same ones (all optional)."""
    up = parser.add_argument_group("gen_triton_model.py flags")
    up.add_argument("--model_type", choices=FRAMEWORKS, help="framework of the compiled model (default pytorch)")
    up.add_argument("--inf2", action="store_true", help="target inf2 (trn1/trn2 with --target trn1/trn2)")
    up.add_argument(
        "--triton_input",
        action="extend",
        nargs="+",
        metavar="NAME,DTYPE,SHAPE",
        help="input tensor, e.g. INPUT__0,INT64,4x384 (no batch dim when --max_batch_size > 0); repeatable, "
        "several items each; omitted: read from the compiled model's .workbench.json or SavedModel",
    )
    up.add_argument(
        "--triton_output",
        action="extend",
        nargs="+",
        metavar="NAME,DTYPE,SHAPE",
        help="output tensor, same form as --triton_input",
    )
    up.add_argument(
        "--compiled_model",
        required=not variant,
        help="compiled model path; relative paths are resolved against the model directory",
    )
    up.add_argument(
        "--neuron_core_range",
        metavar="A:B",
        help="cores A..B (inclusive) split evenly over the instances (default 0:0)",
    )
    up.add_argument(
        "--triton_model_instance_count",
        type=int,
        metavar="N",
        help="model instances sharing the core range (default 1)",
    )
    up.add_argument(
        "--threads_per_core",
        type=int,
        metavar="N",
        help="Neuron: DataParallel workers per core (default: the SDK's, 2); cpu: threads per core (default 1)",
    )
    if not variant:
        up.add_argument("--triton_model_dir", required=True, help="the model directory to write")
        up.add_argument("--model_version", type=int, metavar="N", help="writes N/model.py (default 1)")
    up.add_argument(
        "--max_batch_size",
        type=int,
        metavar="N",
        help="0 (default): requests carry their own batch dim; N > 0: Triton adds a batch dim up to N",
    )
    up.add_argument("--enable_dynamic_batching", action="store_true", help="add a dynamic_batching block")
    up.add_argument(
        "--preferred_batch_size",
        type=int,
        action="extend",
        nargs="+",
        metavar="N",
        help="dynamic batcher preferred size(s), each <= --max_batch_size",
    )
    up.add_argument(
        "--max_queue_delay_microseconds", type=int, metavar="US", help="dynamic batcher queue delay in microseconds"
    )
    up.add_argument(
        "--disable_batch_requests_to_neuron",
        action="store_true",
        help="one model call per request instead of one per batch of requests",
    )
    up.add_argument("--tag_set", help="SavedModel tag set (TensorFlow auto-detection; default serve)")
    up.add_argument("--signature_def_key", help="SavedModel signature (default serving_default)")
    own = parser.add_argument_group("workbench options")
    own.add_argument(
        "--target",
        choices=TARGETS,
        help=f"{', '.join(TARGETS)} (default: inf1 as upstream, or inf2 "
        "with --inf2; transformers_neuronx: this machine's)",
    )
    own.add_argument(
        "--for-other-machine",
        action="store_true",
        dest="for_other_machine",
        help="the compiled model exists only on the serving host: do not check for it",
    )
    own.add_argument(
        "--copy-compiled-model",
        action="store_true",
        dest="copy_compiled_model",
        help="copy the compiled model into DIR/VERSION/ and reference it relatively",
    )
    own.add_argument(
        "--cpu-affinity", action="store_true", dest="cpu_affinity", help="cpu target: pin each instance to its cores"
    )
    own.add_argument(
        "--parameter",
        action="append",
        type=_typed(_key_value),
        dest="parameter",
        metavar="KEY=VALUE",
        help="a config parameter of your own (repeatable)",
    )
    tuned = parser.add_argument_group("Triton config fields (model_config.proto)")
    tuned.add_argument(
        "--instance-group-kind",
        dest="instance_group_kind",
        choices=options.KINDS,
        help="instance_group kind (default KIND_MODEL, as upstream)",
    )
    tuned.add_argument("--instance-group-name", dest="instance_group_name", metavar="NAME")
    tuned.add_argument(
        "--rate-limiter-resource",
        action="append",
        type=_typed(options.parse_resource),
        dest="rate_limiter_resource",
        metavar="NAME:COUNT[:global]",
        help="a resource each instance needs to run (repeatable; needs --rate-limit=execution_count)",
    )
    tuned.add_argument("--rate-limiter-priority", type=int, dest="rate_limiter_priority", metavar="N")
    tuned.add_argument(
        "--preserve-ordering",
        action="store_true",
        dest="preserve_ordering",
        help="dynamic batcher: responses in request order",
    )
    tuned.add_argument("--priority-levels", type=int, dest="priority_levels", metavar="N")
    tuned.add_argument("--default-priority-level", type=int, dest="default_priority_level", metavar="N")
    tuned.add_argument(
        "--default-queue-policy",
        type=_typed(options.parse_queue_policy),
        dest="default_queue_policy",
        metavar="KEY=VALUE,...",
        help="e.g. max_queue_size=16,timeout_action=REJECT,"
        "default_timeout_microseconds=5000000,allow_timeout_override=true",
    )
    tuned.add_argument(
        "--priority-queue-policy",
        action="append",
        type=_typed(options.parse_priority_queue_policy),
        dest="priority_queue_policy",
        metavar="LEVEL:KEY=VALUE,...",
        help="repeatable",
    )
    tuned.add_argument(
        "--optional-input",
        action="append",
        dest="optional_inputs",
        metavar="NAME",
        help="an input requests may leave out (repeatable); model.py passes None in its place",
    )
    tuned.add_argument(
        "--warmup",
        type=int,
        dest="warmup",
        metavar="COUNT",
        help="warm every instance up before READY: COUNT runs of a sample built from the inputs' dtypes "
        "and dims (a variable dim as 1)",
    )
    tuned.add_argument(
        "--warmup-batch-size",
        type=int,
        dest="warmup_batch_size",
        metavar="N",
        help="requests per warm-up run (default 1)",
    )
    tuned.add_argument("--warmup-data", choices=("zero", "random"), dest="warmup_data", help="default zero")
    tuned.add_argument(
        "--response-cache",
        action="store_true",
        dest="response_cache",
        help="response_cache { enable: true } (the workbench's server launcher enables its cache)",
    )
    tuned.add_argument(
        "--version-policy",
        type=_typed(options.parse_version_policy),
        dest="version_policy",
        metavar="latest[:N]|all|specific:V,...",
    )
    tuned.add_argument(
        "--decoupled",
        action="store_true",
        dest="decoupled",
        help="model_transaction_policy { decoupled: true } (needs --model-py)",
    )
    if variant:
        # a variant carries only what its flags give (None and False are left out by _values)
        parser.set_defaults(**{a.dest: None for a in parser._actions if a.dest != "help"})
        return
    tnx = parser.add_argument_group("transformers-neuronx (--model_type transformers_neuronx)")
    tnx.add_argument(
        "--tnx-model-class",
        dest="tnx_model_class",
        help="transformers_neuronx sampling class (default: the compile's, else LlamaForSampling)",
    )
    tnx.add_argument("--tnx-batch-size", dest="tnx_batch_size", type=int, help="default: the compile's, else 1")
    tnx.add_argument(
        "--tnx-tp-degree", dest="tnx_tp_degree", type=int, help="default: the compile's, else the instance's cores"
    )
    tnx.add_argument("--tnx-n-positions", dest="tnx_n_positions", type=int, help="default: the compile's, else 2048")
    tnx.add_argument("--tnx-amp", dest="tnx_amp", choices=TNX_AMPS, help="default: the compile's, else f32")
    tnx.add_argument("--tnx-unroll", dest="tnx_unroll", type=int)
    tnx.add_argument(
        "--tnx-sequence-length",
        dest="tnx_sequence_length",
        type=int,
        help="longest output (default: --tnx-n-positions)",
    )
    tnx.add_argument(
        "--tnx-compiled-dir",
        dest="tnx_compiled_dir",
        help="Neuron graphs saved by the compile (default: the compile's, beside the checkpoint)",
    )


# The PyTorch backend's parameters (the seed page's, and the PyTorch 2 runtime's) as flags:
# INFERENCE_MODE -> --inference-mode; the value is checked with every other parameter of the layout.
_PYTORCH_PARAMETER_FLAGS = {
    "--" + key.lower().replace("_", "-"): parameter
    for key, parameter in {**TORCHSCRIPT_PARAMETERS, **PYTORCH2_PARAMETERS}.items()
}
_METAVARS = {"bool": "true|false", "count": "N", "json": "JSON", "path": "PATH"}


def _add_pytorch_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "Triton's PyTorch backend (--backend pytorch)",
        "config parameters of the LibTorch backend (TorchScript) or of its PyTorch 2 runtime (--runtime model.py); "
        "unset: the backend's default",
    )
    group.add_argument(
        "--backend",
        choices=tuple(BACKENDS),
        help="python (default): the generated model.py for every target; pytorch: Triton's PyTorch "
        "backend serves --compiled_model (a TorchScript archive, or with --runtime model.py a "
        "module's source) on the CPU",
    )
    group.add_argument(
        "--runtime",
        choices=("model.py",),
        help='model.py: the PyTorch 2 layout (config runtime: "model.py"); left out: TorchScript',
    )
    group.add_argument(
        "--state-dict",
        dest="state_dict",
        metavar="FILE",
        help="PyTorch 2 layout: the module's weights (torch.save(model.state_dict())), written as VERSION/model.pt",
    )
    _add_parameter_flags(group)


def _add_parameter_flags(group: Any) -> None:
    for flag, parameter in _PYTORCH_PARAMETER_FLAGS.items():
        group.add_argument(
            flag,
            dest=parameter.key,
            metavar=_METAVARS[parameter.kind],
            help=f"{parameter.key}: {parameter.meaning} (default {parameter.default})",
        )


def _pytorch_parameters(
    given: dict[str, Any],
    values: dict[str, Any],
    *,
    backend: str | None = None,
    inherited: dict[str, Any] | None = None,
) -> None:
    """Move the PyTorch-backend parameter flags into ``values["parameters"]`` (refused for the Python
    backend). A variant names the directory's ``backend`` and changes the ``inherited`` parameters."""
    chosen = {p.key: given[p.key] for p in _PYTORCH_PARAMETER_FLAGS.values() if p.key in given}
    if not chosen:
        return
    if (backend or given.get("backend")) != PYTORCH.name:  # these flags are its config parameters
        flags = [flag for flag, p in _PYTORCH_PARAMETER_FLAGS.items() if p.key in chosen]
        raise GenerateError([f"{', '.join(flags)}: parameter(s) of Triton's PyTorch backend; add --backend pytorch"])
    parameters = dict(values.get("parameters", {}))
    twice = sorted(set(parameters) & set(chosen))
    if twice:
        raise GenerateError([f"{', '.join(twice)} given both as a flag and with --parameter"])
    values["parameters"] = {**(inherited or {}), **parameters, **chosen}


def _variant_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="--variant", allow_abbrev=False, add_help=False)
    _add_setting_flags(parser, variant=True)
    _add_parameter_flags(parser.add_argument_group("Triton's PyTorch backend"))  # e.g. --intra-op-thread-count 2

    def error(message: str) -> NoReturn:
        raise options.OptionError(message)

    parser.error = error  # type: ignore[method-assign]
    return parser


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "generate",
        help="write a Triton model directory (config.pbtxt + model.py); gen_triton_model.py flags",
        description="Generate a Triton model directory for a compiled model: for the Python backend (model.py, "
        "default), with --backend pytorch for Triton's PyTorch (LibTorch) backend, or with --backend "
        "vllm for Triton's vLLM backend (config.pbtxt + 1/model.json; --compiled_model is the model "
        "folder). Takes every "
        "gen_triton_model.py flag with its upstream spelling and meaning; everything is checked before "
        "anything is written, and an existing directory is only changed with --force.",
        allow_abbrev=False,
    )
    _add_setting_flags(parser, variant=False)
    _add_pytorch_flags(parser)
    add_vllm_flags(parser)
    own = parser.add_argument_group("writing")
    own.add_argument(
        "--name",
        help="model name; when it differs from the --triton_model_dir name, that "
        "directory is the repository and the model goes to DIR/NAME",
    )
    own.add_argument(
        "--variant",
        action="append",
        type=_typed(_variant),
        default=[],
        metavar="NAME='FLAGS'",
        help="also write configs/NAME.pbtxt: these settings with FLAGS changed (served with "
        "tritonserver --model-config-name=NAME), e.g. cpu='--target cpu --neuron_core_range 0:1'; "
        "with --backend pytorch e.g. two='--intra-op-thread-count 2' (the model files are shared)",
    )
    own.add_argument(
        "--model-py", dest="model_py", metavar="FILE", help="use this model.py instead of the generated one"
    )
    own.add_argument(
        "--dry-run",
        action="store_true",
        dest="dry_run",
        help="print the files, configs and core map, and the changes to an existing directory; write nothing",
    )
    own.add_argument(
        "--force",
        action="store_true",
        help="write over an existing directory that would change (the old one is kept in <repository>.backups/)",
    )
    _one_line_errors(parser)
    parser.set_defaults(func=run_cli)
    return parser


def _target(values: dict[str, Any], framework: str, notes: list[str]) -> str:
    """Upstream's rule: --inf2 means inf2 (trn1/trn2 with --target trn1/trn2); neither --inf2 nor --target means
    inf1, as upstream generated on every host. transformers_neuronx (not upstream's) defaults to this machine."""
    inf2, target = values.pop("inf2", False), values.pop("target", None)
    if inf2:
        if target in ("cpu", "inf1"):
            raise GenerateError([f"--inf2 contradicts --target {target}"])
        return target or "inf2"
    if target:
        return target
    if framework == "transformers_neuronx":
        return default_target()
    notes.append(
        f"no --target or --inf2: generating for {UPSTREAM_DEFAULT_TARGET}, as upstream gen_triton_model.py "
        "did (--target cpu|inf2|trn1|trn2 for another)"
    )
    return UPSTREAM_DEFAULT_TARGET


def _once(pairs: list[tuple[Any, Any]], what: str) -> dict[Any, Any]:
    """``dict(pairs)``, refusing a key given twice (the last would silently win)."""
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if key in out:
            raise GenerateError([f"{what} {key} is given twice; give it once (the last would silently win)"])
        out[key] = value
    return out


def _values(args: argparse.Namespace, notes: list[str], *, variant: bool) -> dict[str, Any]:
    """GenerateSettings keyword arguments from parsed flags (only the given ones for a variant)."""
    given = {key: value for key, value in vars(args).items() if value is not None and value is not False}
    names = {f.name for f in fields(GenerateSettings)}
    values = {key: value for key, value in given.items() if key in names}
    framework = given.get("model_type") or (None if variant else "pytorch")
    if framework is not None:
        values["framework"] = framework
    values.pop("target", None)
    backend = BACKENDS.get(given.get("backend", ""))
    if backend is not None and len(backend.targets) == 1 and "target" not in given and "inf2" not in given:
        values["target"] = backend.targets[0]  # e.g. LibTorch on the CPU; upstream's inf1 default is model.py's
    elif backend is not None and "inf1" not in backend.targets and "target" not in given and "inf2" not in given:
        here = default_target()  # e.g. vLLM: this machine, where the backend serves it
        values["target"] = here if here in backend.targets else backend.targets[0]
    elif not variant or "target" in given or "inf2" in given:
        values["target"] = _target({k: given.get(k) for k in ("inf2", "target")}, framework or "pytorch", notes)
    if given.get("parameter"):
        values["parameters"] = _once(given["parameter"], "--parameter")
    resources, priority = given.get("rate_limiter_resource"), given.get("rate_limiter_priority")
    if resources or priority is not None:
        values["rate_limiter"] = options.RateLimiter(tuple(resources or ()), priority or 0)
    if given.get("priority_queue_policy"):
        values["priority_queue_policy"] = _once(given["priority_queue_policy"], "--priority-queue-policy level")
    if given.get("warmup") is not None:
        values["model_warmup"] = [
            options.Warmup(
                batch_size=given.get("warmup_batch_size", 1) or 1,
                count=given["warmup"],
                data=given.get("warmup_data") or "zero",
            )
        ]
    elif "warmup_batch_size" in given or "warmup_data" in given:
        raise GenerateError(["--warmup-batch-size and --warmup-data need --warmup COUNT"])
    for flag in ("response_cache", "decoupled"):
        if given.get(flag):
            values[flag] = True
    if not variant:
        _pytorch_parameters(given, values)
        vllm_values(given, values)
    return values


def settings_from_args(args: argparse.Namespace, notes: list[str] | None = None) -> GenerateSettings:
    """The settings the command line describes; ``notes`` collects what was decided for the user."""
    notes = [] if notes is None else notes
    values = _values(args, notes, variant=False)
    variants = {}
    for name, flags in args.variant:
        if name in variants:
            raise GenerateError([f"--variant {name} is given twice; give each variant once"])
        try:
            parsed = _variant_parser().parse_args(shlex.split(flags))
        except (options.OptionError, ValueError) as err:
            raise GenerateError([f"--variant {name}: {flags!r}: {err}"]) from None
        variants[name] = _values(parsed, notes, variant=True)
        given = {key: value for key, value in vars(parsed).items() if value is not None}
        _pytorch_parameters(given, variants[name], backend=values.get("backend"), inherited=values.get("parameters"))
    return GenerateSettings(**values, variants=variants)


def run_cli(args: argparse.Namespace) -> int:
    """0 written, unchanged or dry run; 2 bad settings, changes without --force or a file-system
    refusal (nothing written); 1 any other refusal."""
    notes: list[str] = []
    try:
        generated = render(settings_from_args(args, notes))
    except GenerateError as err:
        for problem in err.problems:
            print(f"workbench generate: error: {problem}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"workbench generate: note: {note}", file=sys.stderr)
    changes = generated.changes()
    # the command is the top layer: how this machine's server would serve the model is server
    # knowledge (server imports generate), asked only here and only when the command runs
    from workbench.server.pytorch import serving_preview

    preview = serving_preview(generated)
    if preview is not None:
        print(
            f"workbench generate: note: {preview.layout} layout; a local server here serves it as: {preview.served_as}",
            file=sys.stderr,
        )
        for note in preview.notes:
            print(f"workbench generate: note: {note}", file=sys.stderr)
    if args.dry_run:
        sys.stdout.write(generated.dry_run())
        if changes.exists:
            sys.stdout.write(f"\n# ---- changes against {generated.dest}\n{changes.summary()}\n{changes.diff}")
        return 0
    if changes.exists and not changes.empty and not args.force:
        sys.stdout.write(f"# ---- changes against {generated.dest}\n{changes.summary()}\n{changes.diff}")
        print(
            f"workbench generate: error: {generated.dest} already exists; nothing was written. Writing would change "
            f"it ({changes.headline()}; shown above): rerun with --force to write it (the old directory is kept "
            "in <repository>.backups/)",
            file=sys.stderr,
        )
        return 2
    try:
        result = write(generated, overwrite=args.force)
    except (FileSystemRefusal, OSError) as err:
        print(f"workbench generate: error: {err}", file=sys.stderr)
        return 2
    except RepositoryError as err:
        print(f"workbench generate: error: {err}", file=sys.stderr)
        return 1
    for warning in generated.warnings:
        print(f"workbench generate: warning: {warning}", file=sys.stderr)
    if result.unchanged:
        print(f"unchanged {result.path}: it already holds exactly these files")
    else:
        print(f"wrote {result.path}" + (f" (previous directory kept as {result.backup})" if result.backup else ""))
    if generated.core_map is not None:
        print(generated.core_map.describe())
    return 0
