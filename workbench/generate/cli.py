"""The `workbench generate` command: gen_triton_model.py's flags, spelled as upstream, plus ours.

Exit status 0 written (or dry run), 2 bad settings (nothing written), 1 refused by the file
system. Loaded through `workbench.cli.SUBCOMMANDS` only when the command is ``generate``, and it
imports nothing heavy (no torch), so ``workbench generate --help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from typing import Any

from workbench.generate.config import FRAMEWORKS, TARGETS
from workbench.generate.python_backend import render, write
from workbench.generate.repository import RepositoryError, diff_model_dir
from workbench.generate.settings import TNX_AMPS, GenerateError, GenerateSettings, default_target

__all__ = ["register", "run_cli", "settings_from_args"]


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Usage errors as one line and exit status 2 (argparse prints the whole usage block)."""
    prog = parser.prog

    def error(message: str) -> None:
        print(f"{prog}: error: {message} (see {prog} --help)", file=sys.stderr)
        raise SystemExit(2)

    def parse_known_args(args=None, namespace=None):
        parsed, extras = argparse.ArgumentParser.parse_known_args(parser, args, namespace)
        if extras:
            error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    parser.error = error  # type: ignore[method-assign]
    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "generate",
        help="write a Triton model directory (config.pbtxt + model.py); gen_triton_model.py flags",
        description="Generate a Triton Python-backend model directory for a compiled model. Takes every "
                    "gen_triton_model.py flag with its upstream spelling; everything is checked before "
                    "anything is written.",
        allow_abbrev=False,
    )
    up = parser.add_argument_group("gen_triton_model.py flags")
    up.add_argument("--model_type", choices=FRAMEWORKS, default="pytorch",
                    help="framework of the compiled model (default pytorch)")
    up.add_argument("--inf2", action="store_true", help="target inf2 (trn1/trn2 with --target trn1/trn2)")
    up.add_argument("--triton_input", action="extend", nargs="+", default=[], metavar="NAME,DTYPE,SHAPE",
                    help="input tensor, e.g. INPUT__0,INT64,4x384 (no batch dim when --max_batch_size > 0); repeatable, "
                         "several items each; omitted: read from the compiled model's .workbench.json or SavedModel")
    up.add_argument("--triton_output", action="extend", nargs="+", default=[], metavar="NAME,DTYPE,SHAPE",
                    help="output tensor, same form as --triton_input")
    up.add_argument("--compiled_model", required=True,
                    help="compiled model path; relative paths are resolved against the model directory")
    up.add_argument("--neuron_core_range", default="0:0", metavar="A:B",
                    help="cores A..B (inclusive) split evenly over the instances (default 0:0)")
    up.add_argument("--triton_model_instance_count", type=int, default=1, metavar="N",
                    help="model instances sharing the core range (default 1)")
    up.add_argument("--threads_per_core", type=int, default=None, metavar="N",
                    help="Neuron: DataParallel workers per core (default: the SDK's, 2); cpu: threads per core "
                         "(default 1)")
    up.add_argument("--triton_model_dir", required=True, help="the model directory to write")
    up.add_argument("--model_version", type=int, default=1, metavar="N", help="writes N/model.py (default 1)")
    up.add_argument("--max_batch_size", type=int, default=0, metavar="N",
                    help="0 (default): requests carry their own batch dim; N > 0: Triton adds a batch dim up to N")
    up.add_argument("--enable_dynamic_batching", action="store_true", help="add a dynamic_batching block")
    up.add_argument("--preferred_batch_size", type=int, action="extend", nargs="+", default=[], metavar="N",
                    help="dynamic batcher preferred size(s), each <= --max_batch_size")
    up.add_argument("--max_queue_delay_microseconds", type=int, metavar="US",
                    help="dynamic batcher queue delay in microseconds")
    up.add_argument("--disable_batch_requests_to_neuron", action="store_true",
                    help="one model call per request instead of one per batch of requests")
    up.add_argument("--tag_set", default="serve", help="SavedModel tag set (TensorFlow auto-detection)")
    up.add_argument("--signature_def_key", default="serving_default", help="SavedModel signature")
    own = parser.add_argument_group("workbench options")
    own.add_argument("--target", choices=TARGETS, help=f"{', '.join(TARGETS)} (default: this machine's)")
    own.add_argument("--name", help="model name; when it differs from the --triton_model_dir name, that "
                                    "directory is the repository and the model goes to DIR/NAME")
    own.add_argument("--dry-run", action="store_true", dest="dry_run",
                     help="print the files and the core map; write nothing")
    own.add_argument("--force", action="store_true",
                     help="replace an existing directory (the old one is kept in <repository>.backups/)")
    own.add_argument("--for-other-machine", action="store_true", dest="for_other_machine",
                     help="the compiled model exists only on the serving host: do not check for it")
    own.add_argument("--copy-compiled-model", action="store_true", dest="copy_compiled_model",
                     help="copy the compiled model into DIR/VERSION/ and reference it relatively")
    own.add_argument("--cpu-affinity", action="store_true", dest="cpu_affinity",
                     help="cpu target: pin each instance to its cores")
    tnx = parser.add_argument_group("transformers-neuronx (--model_type transformers_neuronx)")
    tnx.add_argument("--tnx-model-class", dest="tnx_model_class",
                     help="transformers_neuronx sampling class (default: the compile's, else LlamaForSampling)")
    tnx.add_argument("--tnx-batch-size", dest="tnx_batch_size", type=int, help="default: the compile's, else 1")
    tnx.add_argument("--tnx-tp-degree", dest="tnx_tp_degree", type=int,
                     help="default: the compile's, else the instance's cores")
    tnx.add_argument("--tnx-n-positions", dest="tnx_n_positions", type=int, help="default: the compile's, else 2048")
    tnx.add_argument("--tnx-amp", dest="tnx_amp", choices=TNX_AMPS, help="default: the compile's, else f32")
    tnx.add_argument("--tnx-unroll", dest="tnx_unroll", type=int)
    tnx.add_argument("--tnx-sequence-length", dest="tnx_sequence_length", type=int,
                     help="longest output (default: --tnx-n-positions)")
    tnx.add_argument("--tnx-compiled-dir", dest="tnx_compiled_dir",
                     help="Neuron graphs saved by the compile (default: the compile's, beside the checkpoint)")
    _one_line_errors(parser)
    parser.set_defaults(func=run_cli)
    return parser


def _target_from_args(args: argparse.Namespace) -> str:
    if args.inf2:
        if args.target in ("cpu", "inf1"):
            raise GenerateError([f"--inf2 contradicts --target {args.target}"])
        return args.target or "inf2"
    return args.target or default_target()


def settings_from_args(args: argparse.Namespace) -> GenerateSettings:
    names = {f.name for f in fields(GenerateSettings)}
    values = {key: value for key, value in vars(args).items() if key in names}
    values["framework"] = args.model_type
    values["target"] = _target_from_args(args)
    return GenerateSettings(**values)


def _upstream_target_note(args: argparse.Namespace, target: str) -> str | None:
    """Upstream had no --target: without --inf2 it generated inf1 code, on any host. Say so when the
    machine's default differs, so a copied upstream command line is not silently reinterpreted."""
    if args.target or args.inf2 or target in ("cpu", "inf1"):
        return None
    return (f"no --target/--inf2: using this machine's target {target} (upstream gen_triton_model.py "
            "generated inf1 code without --inf2; pass --target inf1 for that)")


def run_cli(args: argparse.Namespace) -> int:
    """0 written (or dry run), 2 bad settings (nothing written), 1 refused by the file system."""
    try:
        settings = settings_from_args(args)
        generated = render(settings)
    except GenerateError as err:
        for problem in err.problems:
            print(f"workbench generate: error: {problem}", file=sys.stderr)
        return 2
    note = _upstream_target_note(args, settings.target)
    if note:
        generated.warnings.insert(0, note)
    if args.dry_run:
        sys.stdout.write(generated.dry_run())
        if generated.dest.exists():
            changes = diff_model_dir(generated.dest, generated.files) or "(no changes)\n"
            sys.stdout.write(f"\n# ---- changes against {generated.dest}\n{changes}")
        return 0
    try:
        result = write(generated, overwrite=args.force)
    except (RepositoryError, OSError) as err:
        print(f"workbench generate: error: {err}", file=sys.stderr)
        return 1
    for warning in generated.warnings:
        print(f"workbench generate: warning: {warning}", file=sys.stderr)
    print(f"wrote {result.path}" + (f" (previous directory kept as {result.backup})" if result.backup else ""))
    print(generated.core_map.describe())
    return 0
