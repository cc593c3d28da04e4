"""Read-back of model directories for Triton's PyTorch backend (both layouts, configs/ variants):
generate -> read back -> the same settings and an unchanged directory (Hypothesis over the
backend's parameter space), and hand-written directories the real backend serves but the workbench
would not write: read back with nothing lost, or refused naming the field. Real files, real
TorchScript archives and state dicts; no server (test_libtorch_backend_pt2.py serves the layouts)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

import pytest
import torch
from test_generate_pytorch_backend import MODULE_SOURCE

from workbench import generate as gen
from workbench.cli import generate as generate_cli
from workbench.generate import GenerateSettings, load_settings, read_back, render, validate
from workbench.generate.config import read_config
from workbench.generate.pytorch_backend.layouts import FALSE_SPELLINGS, PYTORCH2_PARAMETERS, TORCHSCRIPT_PARAMETERS, TRUE_SPELLINGS

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st  # noqa: E402

SOURCE = MODULE_SOURCE  # the module test_generate_pytorch_backend.py generates from
SPEC = dict(triton_input=["INPUT__0,FP32,4"], triton_output=["OUTPUT__0,FP32,3"])


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """One module source, its state dict and its TorchScript archive, of the same weights."""
    root = tmp_path_factory.mktemp("sources")
    paths = {"py": root / "net.py", "weights": root / "weights.pt", "archive": root / "net.pt"}
    paths["py"].write_text(SOURCE)
    namespace: dict = {}
    exec(compile(SOURCE, "net.py", "exec"), namespace)
    torch.manual_seed(0)
    net = namespace["Net"]().eval()
    torch.save(net.state_dict(), paths["weights"])
    torch.jit.trace(net, torch.zeros(1, 4)).save(str(paths["archive"]))
    return paths


def _value(parameter) -> st.SearchStrategy:
    if parameter.kind == "bool":
        return st.sampled_from(TRUE_SPELLINGS + FALSE_SPELLINGS + ("TRUE", "False"))
    if parameter.kind == "count":
        return st.integers(1, 4).map(str)
    return st.sampled_from([json.dumps(v) for v in ({}, {"disable": True}, {"mode": "default", "fullgraph": False},
                                                    {"backend": "inductor", "dynamic": None})])


def _parameters(table) -> st.SearchStrategy:
    keys = {key: _value(p) for key, p in table.items() if p.kind != "path"}
    return st.fixed_dictionaries({}, optional=keys)


@st.composite
def pytorch_settings(draw, sources: dict[str, Path]) -> GenerateSettings:
    layout = draw(st.sampled_from(["torchscript", "pytorch2", "pytorch2-archive"]))
    table = TORCHSCRIPT_PARAMETERS if layout == "torchscript" else PYTORCH2_PARAMETERS
    max_batch = draw(st.sampled_from([0, 1, 4, 8]))
    dynamic = max_batch > 0 and draw(st.booleans())
    preferred = sorted(draw(st.sets(st.integers(1, max_batch), max_size=2))) if dynamic else []
    variants = {}
    if draw(st.booleans()):
        variants["alt"] = {"parameters": draw(_parameters(table)),
                           "triton_model_instance_count": draw(st.integers(1, 3))}
    return GenerateSettings(
        triton_model_dir="", backend="pytorch", target="cpu",
        runtime="" if layout == "torchscript" else "model.py",
        compiled_model=str(sources["py"] if layout == "pytorch2" else sources["archive"]),
        state_dict=str(sources["weights"]) if layout == "pytorch2" and draw(st.booleans()) else "",
        max_batch_size=max_batch, enable_dynamic_batching=dynamic, preferred_batch_size=preferred,
        max_queue_delay_microseconds=draw(st.sampled_from([None, 100])) if dynamic else None,
        instance_group_kind=draw(st.sampled_from(["KIND_CPU", "KIND_MODEL"])),
        triton_model_instance_count=draw(st.integers(1, 3)), model_version=draw(st.integers(1, 3)),
        parameters=draw(_parameters(table)), variants=variants, **SPEC)


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generate_then_read_back_gives_the_same_settings_and_rewrites_nothing(sources, data):
    settings = data.draw(pytorch_settings(sources))
    with tempfile.TemporaryDirectory() as scratch:
        settings = dataclasses.replace(settings, triton_model_dir=str(Path(scratch) / "m"))
        gen.write(render(settings))
        back = read_back(settings.model_dir)
        loaded = back.settings
        version = settings.model_dir / str(settings.model_version)
        # the model files now come from the directory itself, where the backend loads them
        model_file = "model.py" if settings.compiled_model.endswith(".py") else "model.pt"
        assert loaded.compiled_model == str(version / model_file)
        assert loaded.state_dict == (str(version / "model.pt") if settings.state_dict else "")
        assert Path(loaded.compiled_model).read_bytes() == Path(settings.compiled_model).read_bytes()
        # a variant holds the fields where its config differs from config.pbtxt (one equal to it: none)
        variants = {name: {k: v for k, v in overrides.items() if v != getattr(settings, k)}
                    for name, overrides in settings.variants.items()}
        expected = dataclasses.replace(settings, compiled_model=loaded.compiled_model, state_dict=loaded.state_dict,
                                       variants=variants)
        assert loaded == expected, [f.name for f in dataclasses.fields(loaded)
                                    if getattr(loaded, f.name) != getattr(expected, f.name)]
        assert render(loaded).changes().empty  # regenerating the read-back settings rewrites nothing
        assert gen.write(render(loaded)).unchanged


def _hand_written(root: Path, sources: dict[str, Path]) -> Path:
    """What a user (or an older Triton tutorial) writes for the real backend: ``platform`` instead of
    ``backend``, no instance_group, a default_model_filename, comments, an older version and a file
    of their own; every field and file is one the real backend accepts."""
    model = root / "legacy"
    for version in ("1", "3"):
        (model / version).mkdir(parents=True)
    (model / "1" / "model.pt").write_bytes(sources["archive"].read_bytes())
    (model / "3" / "traced.pt").write_bytes(sources["archive"].read_bytes())
    (model / "labels.txt").write_text("cat\ndog\nbird\n")
    (model / "config.pbtxt").write_text("""\
# served by LibTorch since 2021
name: "legacy"
platform: "pytorch_libtorch"
default_model_filename: "traced.pt"
max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" } ]
parameters: { key: "INFERENCE_MODE" value: { string_value: "false" } }
optimization { input_pinned_memory { enable: false } }
""")
    return model


def test_a_hand_written_libtorch_directory_reads_back_and_rewrites_keeping_everything(tmp_path, sources):
    model = _hand_written(tmp_path, sources)
    back = read_back(model)
    s = back.settings
    assert (s.backend, s.runtime, s.state_dict, s.model_version) == ("pytorch", "", "", 3)
    assert s.compiled_model == str(model / "3" / "traced.pt") and s.parameters == {"INFERENCE_MODE": "false"}
    assert s.instance_group_kind == "KIND_MODEL" and s.max_batch_size == 4  # no instance_group: the default
    assert sorted(s.extra_files) == ["1/model.pt", "labels.txt"]
    assert 'platform: "pytorch_libtorch"' in s.extra_config and "default_model_filename" in s.extra_config
    assert "label_filename" in s.extra_config and "input_pinned_memory" in s.extra_config
    assert any("platform" in note for note in back.notes)
    assert validate(s) == []
    generated = render(s)
    changes = generated.changes()
    print(changes.summary())
    assert (changes.added, changes.removed, changes.modified) == ((), (), ("config.pbtxt",)), changes.summary()
    assert all("backend" in line or "instance_group" in line for line in changes.config_changes), changes.summary()
    gen.write(generated, overwrite=True)
    cfg = read_config(model)
    assert (cfg.backend, cfg.platform, cfg.default_model_filename) == ("pytorch", "pytorch_libtorch", "traced.pt")
    assert cfg.output[0].label_filename == "labels.txt" and not cfg.optimization.input_pinned_memory.enable
    assert (model / "labels.txt").read_text() == "cat\ndog\nbird\n" and (model / "1" / "model.pt").is_file()
    assert (model / "3" / "traced.pt").read_bytes() == sources["archive"].read_bytes()
    assert render(load_settings(model)).changes().empty  # and from here it is a fixed point


def test_what_the_real_backend_accepts_but_the_workbench_does_not_write_is_refused_by_name(tmp_path, sources):
    """r24.10 ignores an unknown key and refuses ' true' only at load; a PyTorch 2 default_model_filename
    is not what the workbench writes: each reads back as written, and the checks name it."""
    model = _hand_written(tmp_path, sources)
    text = (model / "config.pbtxt").read_text()
    (model / "config.pbtxt").write_text(text.replace('string_value: "false"', 'string_value: " true"')
                                        + 'parameters: { key: "INFERENCE_MODES" value: { string_value: "true" } }\n')
    s = load_settings(model)
    assert s.parameters == {"INFERENCE_MODE": " true", "INFERENCE_MODES": "true"}
    problems = validate(s)
    assert any("INFERENCE_MODE = ' true' is not a boolean" in p and "without spaces" in p for p in problems)
    assert any("parameter INFERENCE_MODES is not read by the PyTorch backend" in p for p in problems)
    with pytest.raises(gen.GenerateError):
        render(s)
    # a runtime the backend does not have is named
    (model / "config.pbtxt").write_text(text + 'runtime: "model.pyc"\n')
    assert any("--runtime 'model.pyc' is not supported" in p for p in validate(load_settings(model)))
    # PyTorch 2 with default_model_filename (the runtime's net.py + net.pt): reads back, and writing names the field
    pt2 = tmp_path / "pt2"
    (pt2 / "1").mkdir(parents=True)
    (pt2 / "1" / "net.py").write_text(SOURCE)
    (pt2 / "1" / "net.pt").write_bytes(sources["weights"].read_bytes())
    (pt2 / "config.pbtxt").write_text('name: "pt2"\nbackend: "pytorch"\nruntime: "model.py"\n'
                                      'default_model_filename: "net.py"\nmax_batch_size: 0\n'
                                      'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]\n'
                                      'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n')
    s = load_settings(pt2)
    assert (s.runtime, s.compiled_model, s.state_dict) == ("model.py", str(pt2 / "1" / "net.py"), str(pt2 / "1" / "net.pt"))
    assert s.extra_files == {}
    with pytest.raises(gen.GenerateError, match="default_model_filename 'net.py': the workbench writes the PyTorch 2"):
        render(s)


def test_a_pytorch2_runtime_with_only_a_torchscript_archive_reads_back_and_regenerates(tmp_path, sources):
    """Difference-table row 18: the real runtime torch.jit.loads a lone model.pt; the workbench now
    writes that layout too (with a warning that says so) and reads it back."""
    settings = GenerateSettings(triton_model_dir=str(tmp_path / "jit"), backend="pytorch", target="cpu",
                                runtime="model.py", compiled_model=str(sources["archive"]), max_batch_size=4,
                                instance_group_kind="KIND_CPU", parameters={"NUM_THREADS": "1"}, **SPEC)
    generated = render(settings)
    assert sorted(generated.files) == ["1/model.pt", "config.pbtxt"]
    assert any("loads it with torch.jit.load" in w for w in generated.warnings)
    gen.write(generated)
    back = read_back(settings.model_dir)
    assert back.settings.compiled_model == str(settings.model_dir / "1" / "model.pt") and back.settings.state_dict == ""
    assert any("TorchScript archive (torch.jit.load)" in note for note in back.notes)
    assert render(back.settings).changes().empty
    with pytest.raises(gen.GenerateError, match="carries its weights"):
        render(dataclasses.replace(settings, state_dict=str(sources["weights"])))


def _generate(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workbench", allow_abbrev=False)
    generate_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", *argv])
    return args.func(args)


def test_generate_backend_pytorch_variant_writes_configs_that_read_back(tmp_path, capsys, sources):
    """`workbench generate --backend pytorch --variant`: the server core reads configs/<name>.pbtxt
    under --model-config-name for any backend, so variants are written; a variant may change the
    backend's parameters and the Triton fields, not the model files they share."""
    model = tmp_path / "repo" / "net"
    base = ["--backend", "pytorch", "--triton_model_dir", str(model), "--compiled_model", str(sources["archive"]),
            "--triton_input", "INPUT__0,FP32,4", "--triton_output", "OUTPUT__0,FP32,3", "--max_batch_size", "8",
            "--instance-group-kind", "KIND_CPU", "--inference-mode", "false"]
    assert _generate([*base, "--variant", "bad=--intra-op-thread-count 0"]) == 2
    assert "configs/bad.pbtxt: parameter INTRA_OP_THREAD_COUNT = 0 must be at least 1" in capsys.readouterr().err
    assert _generate([*base, "--variant", "alt=--runtime model.py"]) == 2
    assert "unrecognized arguments: --runtime model.py" in capsys.readouterr().err
    assert not model.exists()
    assert _generate([*base, "--variant", "two=--intra-op-thread-count 2 --triton_model_instance_count 2"]) == 0
    variant = read_config(model / "configs" / "two.pbtxt")
    assert variant.backend == "pytorch" and variant.instance_group[0].count == 2
    assert {k: v.string_value for k, v in variant.parameters.items()} == {"INFERENCE_MODE": "false",
                                                                          "INTRA_OP_THREAD_COUNT": "2"}
    loaded = load_settings(model)
    assert loaded.variants == {"two": {"triton_model_instance_count": 2,
                                       "parameters": {"INFERENCE_MODE": "false", "INTRA_OP_THREAD_COUNT": "2"}}}
    assert render(loaded).changes().empty
    with pytest.raises(gen.GenerateError, match="--state-dict cannot differ between the configs"):
        render(dataclasses.replace(loaded, variants={"w": {"state_dict": str(sources["weights"])}}))


def test_a_torchscript_archive_under_the_pytorch2_runtime_takes_its_tensors_from_the_compile_record(tmp_path):
    """As in the TorchScript layout, the archive's .workbench.json sidecar names the tensors."""
    from workbench import zoo
    from workbench.compiler import compile_model

    model = zoo.get("add_sub")
    artifact = compile_model(model.module, model.example_inputs(2), "cpu", out_dir=tmp_path / "compiled", name="add_sub")
    generated = render(GenerateSettings(triton_model_dir=str(tmp_path / "repo" / "m"), backend="pytorch", target="cpu",
                                        runtime="model.py", compiled_model=str(artifact.path), max_batch_size=8,
                                        instance_group_kind="KIND_CPU"))
    assert generated.config.runtime == "model.py" and sorted(generated.files) == ["1/model.pt", "config.pbtxt"]
    assert [t.name for t in generated.config.input] == ["INPUT__0", "INPUT__1"]
    assert [t.name for t in generated.config.output] == ["OUTPUT__0", "OUTPUT__1"]
    (tmp_path / "compiled" / "plain.py").write_text(SOURCE)  # a module's source records no tensors
    with pytest.raises(gen.GenerateError) as refused:
        render(GenerateSettings(triton_model_dir=str(tmp_path / "repo" / "n"), backend="pytorch", target="cpu",
                                runtime="model.py", compiled_model=str(tmp_path / "compiled" / "plain.py")))
    assert refused.value.problems == ["--triton_input and --triton_output are required (a TorchScript archive keeps "
                                      "no names, dtypes or shapes unless the compile step recorded them beside it)"]
