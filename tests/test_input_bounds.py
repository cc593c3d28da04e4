"""Every input family at and past its bounds (issue 32): core ranges, thread counts, warm-up, queue
policies, the rate limiter and deploy names, driven through the CLI and the API with values
Hypothesis picks around each limit. Past a limit: exit 2, one line naming the flag, nothing
written; at or below it: accepted. Every call runs in one worker process under an address-space
limit (RLIMIT_AS), so a value that makes the workbench enumerate or allocate by it fails the
test instead of eating the machine (0:99999999999999999999 once took 23.5 GB).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.coremap import CORE_INDEX_LIMIT, CoreRange, CoreRangeError
from workbench.limits import INT32_MAX, field_range, thread_count_limit

from bounded_worker import Worker, worker_fixture

QUICK = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
UINT32_MAX = 2 ** 32 - 1


worker = worker_fixture("bounded")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """add_sub compiled for the CPU (its sidecar gives generate the inputs and outputs)."""
    from workbench import zoo
    from workbench.compiler import compile_model

    model = zoo.get("add_sub")
    return Path(compile_model(model.module, model.example_inputs(2), "cpu",
                              out_dir=tmp_path_factory.mktemp("compiled"), name="add_sub").path)


_counter = iter(range(10 ** 9))


def _fresh(root: Path) -> Path:
    return root / f"m{next(_counter)}"


def generate(worker: Worker, compiled: Path, root: Path, *flags: str, backend: str = "python") -> tuple[int, str, Path]:
    """``workbench generate`` for add_sub (max batch 8) with ``flags``; (rc, stderr, model dir)."""
    target = _fresh(root)
    rc, _out, err = worker.cli("generate", "--compiled_model", str(compiled), "--target", "cpu",
                               "--for-other-machine", "--triton_model_dir", str(target), "--max_batch_size", "8",
                               *(["--backend", "pytorch"] if backend == "pytorch" else []), *flags)
    return rc, err, target


def refused(rc: int, err: str, target: Path, *words: str) -> None:
    """Exit 2, one error line naming ``words``, nothing written."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("workbench "), err
    assert "Traceback" not in err and all(word in lines[0] for word in words), err
    assert not target.exists()


def accepted(rc: int, err: str, target: Path) -> None:
    assert rc == 0, err
    assert (target / "config.pbtxt").is_file()


# ---- core ranges ---------------------------------------------------------------------------------

huge = st.integers(min_value=CORE_INDEX_LIMIT, max_value=2 ** 80)
past_cores = st.one_of(st.just(CORE_INDEX_LIMIT), huge)


@QUICK
@given(start=st.integers(0, 16), end=past_cores)
def test_core_ranges_past_every_machine_are_refused_in_cli_and_api(worker, compiled, tmp_path, start, end):
    rc, err, target = generate(worker, compiled, tmp_path, "--neuron_core_range", f"{start}:{end}")
    refused(rc, err, target, "--neuron_core_range", f"core {end} exists on no machine")
    rc, err, target = generate(worker, compiled, tmp_path, "--variant", f"v=--neuron_core_range {start}:{end}")
    refused(rc, err, target, "exists on no machine")
    rc, _out, err = worker.api(f"from workbench.coremap import CoreRange; CoreRange({start}, {end})")
    assert rc == -1 and err.startswith("CoreRangeError:") and "exists on no machine" in err


@QUICK
@given(end=st.integers(0, CORE_INDEX_LIMIT - 1))
def test_core_ranges_up_to_the_limit_are_planned_by_arithmetic(worker, compiled, tmp_path, end):
    rc, err, target = generate(worker, compiled, tmp_path, "--neuron_core_range", f"0:{end}")
    accepted(rc, err, target)
    gaps = CoreRange(0, end).missing_from({0, 2})
    assert sum(gap.size for gap in gaps) == end + 1 - len({0, 2} & set(range(end + 1)))


@QUICK
@given(end=past_cores)
def test_a_sweep_core_range_past_every_machine_is_refused_before_a_server(worker, sweep_model, tmp_path, end):
    out = _fresh(tmp_path)
    rc, _out, err = worker.cli("sweep", str(sweep_model), "--core-range", f"0:{end}", "--out", str(out),
                               "--engine", "workbench")
    refused(rc, err, out, "exists on no machine")


@pytest.fixture(scope="module")
def sweep_model(compiled, tmp_path_factory) -> Path:
    from workbench import generate as gen

    folder = tmp_path_factory.mktemp("sweep") / "repo" / "add_sub"
    gen.write(gen.render(gen.GenerateSettings(triton_model_dir=str(folder), compiled_model=str(compiled),
                                              copy_compiled_model=True, target="cpu", neuron_core_range="0:0",
                                              max_batch_size=8)))
    return folder


def test_core_range_gaps_are_runs_not_lists():
    with pytest.raises(CoreRangeError, match="exists on no machine"):
        CoreRange.parse("0:99999999999999999999")
    assert CoreRange(0, CORE_INDEX_LIMIT - 1).missing_from(range(CORE_INDEX_LIMIT)) == ()


# ---- thread counts (Triton's PyTorch backend reads them with std::stoi) -------------------------------

@pytest.fixture(scope="module")
def torchscript(tmp_path_factory) -> Path:
    import torch

    from workbench import zoo

    model = zoo.get("add_sub")
    path = tmp_path_factory.mktemp("ts") / "add_sub.pt"
    torch.jit.trace(model.module, tuple(model.example_inputs(2))).save(str(path))
    return path


THREAD_FLAGS = ("--intra-op-thread-count", "--inter-op-thread-count")


def _pytorch(worker, torchscript, root, *flags):
    target = _fresh(root)
    rc, _out, err = worker.cli("generate", "--backend", "pytorch", "--compiled_model", str(torchscript),
                               "--copy-compiled-model", "--triton_input", "INPUT__0,FP32,4", "INPUT__1,FP32,4",
                               "--triton_output", "OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4", "--max_batch_size", "8",
                               "--triton_model_dir", str(target), *flags)
    return rc, err, target


HOST_THREADS = thread_count_limit().value  # what this machine can run (issue 47 H3), far below int32


@QUICK
@given(flag=st.sampled_from(THREAD_FLAGS),
       count=st.one_of(st.just(INT32_MAX + 1), st.integers(INT32_MAX + 1, 2 ** 80), st.integers(-2 ** 40, 0)),
       text=st.sampled_from(["{}", "1e20", "{}.0", " {}x"]))
def test_thread_counts_past_int32_or_not_whole_are_refused(worker, torchscript, tmp_path, flag, count, text):
    value = text.format(count) if "{}" in text else text
    rc, err, target = _pytorch(worker, torchscript, tmp_path, flag, value)
    key = flag.strip("-").replace("-", "_").upper()
    refused(rc, err, target, key)


@QUICK
@given(flag=st.sampled_from(THREAD_FLAGS),
       count=st.one_of(st.just(HOST_THREADS + 1), st.just(100_000), st.integers(HOST_THREADS + 1, INT32_MAX)))
def test_thread_counts_past_what_the_host_can_run_are_refused(worker, torchscript, tmp_path, flag, count):
    """Below int32 but past the host's threads: LibTorch's pool fails with EAGAIN while loading and
    tritonserver aborts (100000 on a host allowing 32768, issue 47 H3). Refused, naming the bound."""
    rc, err, target = _pytorch(worker, torchscript, tmp_path, flag, str(count))
    refused(rc, err, target, flag.strip("-").replace("-", "_").upper(), f"at most {HOST_THREADS}")


@QUICK
@given(flag=st.sampled_from(THREAD_FLAGS), count=st.one_of(st.just(HOST_THREADS), st.integers(1, HOST_THREADS)))
def test_thread_counts_up_to_the_hosts_limit_are_accepted(worker, torchscript, tmp_path, flag, count):
    rc, err, target = _pytorch(worker, torchscript, tmp_path, flag, str(count), "--dry-run")
    assert rc == 0, err
    assert not target.exists()  # a dry run


# ---- warm-up -------------------------------------------------------------------------------------------

@QUICK
@given(count=st.one_of(st.just(10_001), st.integers(10_001, 2 ** 70)))
def test_warmup_counts_past_the_limit_are_refused(worker, compiled, tmp_path, count):
    rc, err, target = generate(worker, compiled, tmp_path, "--warmup", str(count))
    refused(rc, err, target, "warm-up sample", "count")


@QUICK
@given(batch=st.one_of(st.just(9), st.integers(9, 2 ** 40)))
def test_warmup_batches_past_max_batch_are_refused(worker, compiled, tmp_path, batch):
    rc, err, target = generate(worker, compiled, tmp_path, "--warmup", "1", "--warmup-batch-size", str(batch))
    refused(rc, err, target, "batch_size")


@QUICK
@given(flag_text=st.sampled_from([("--warmup", t) for t in ("1e20", "1.5", "-", "0x10", "")]
                                 + [("--rate-limiter-resource", t) for t in ("R:1e20", "R:1.5", "R:", "R:x", ":1")]))
def test_spellings_that_are_not_counts_are_one_line(worker, compiled, tmp_path, flag_text):
    rc, err, target = generate(worker, compiled, tmp_path, *flag_text)
    refused(rc, err, target, flag_text[0])


@QUICK
@given(count=st.integers(0, 10_000), batch=st.integers(1, 8))
def test_warmups_within_bounds_are_written(worker, compiled, tmp_path, count, batch):
    rc, err, target = generate(worker, compiled, tmp_path, "--warmup", str(count), "--warmup-batch-size", str(batch))
    accepted(rc, err, target)


# ---- queue policies --------------------------------------------------------------------------------------

QUEUE = ("--enable_dynamic_batching", "--priority-levels", "3", "--default-priority-level", "1")


def _queue_high(key: str) -> int:
    return field_range("ModelQueuePolicy", key)[1]  # max_queue_size uint32, the timeout uint64


@QUICK
@given(key=st.sampled_from(["max_queue_size", "default_timeout_microseconds"]), past=st.integers(1, 2 ** 80),
       exact=st.booleans(), where=st.sampled_from(["--default-queue-policy", "--priority-queue-policy"]))
def test_queue_policy_values_past_their_field_are_refused(worker, compiled, tmp_path, key, past, exact, where):
    value = _queue_high(key) + (1 if exact else past)
    text = f"{key}={value}" if where == "--default-queue-policy" else f"2:{key}={value}"
    rc, err, target = generate(worker, compiled, tmp_path, *QUEUE, where, text)
    refused(rc, err, target, key)


@QUICK
@given(level=st.integers(1, 3), key=st.sampled_from(["max_queue_size", "default_timeout_microseconds"]))
def test_repeated_queue_levels_and_keys_are_refused(worker, compiled, tmp_path, level, key):
    rc, err, target = generate(worker, compiled, tmp_path, *QUEUE, "--priority-queue-policy", f"{level}:{key}=1",
                               "--priority-queue-policy", f"{level}:{key}=2")
    refused(rc, err, target, f"level {level} is given twice")
    rc, err, target = generate(worker, compiled, tmp_path, *QUEUE, "--default-queue-policy", f"{key}=1,{key}=2")
    refused(rc, err, target, f"key {key} is given twice")


@QUICK
@given(level=st.one_of(st.integers(4, 2 ** 70), st.integers(-2 ** 70, 0)))
def test_priority_levels_outside_the_declared_ones_are_refused(worker, compiled, tmp_path, level):
    rc, err, target = generate(worker, compiled, tmp_path, *QUEUE, "--priority-queue-policy", f"{level}:max_queue_size=1")
    refused(rc, err, target, "--priority-queue-policy")


@QUICK
@given(key=st.sampled_from(["max_queue_size", "default_timeout_microseconds"]), below=st.integers(0, 2 ** 80),
       exact=st.booleans(), level=st.integers(1, 3))
def test_queue_policies_within_their_fields_are_written(worker, compiled, tmp_path, key, below, exact, level):
    size = _queue_high(key) if exact else below % (_queue_high(key) + 1)
    rc, err, target = generate(worker, compiled, tmp_path, *QUEUE, "--priority-queue-policy", f"{level}:{key}={size}")
    accepted(rc, err, target)


def test_repeated_variants_and_parameters_are_refused(worker, compiled, tmp_path):
    rc, err, target = generate(worker, compiled, tmp_path, "--variant", "x=--max_batch_size 4", "--variant",
                               "x=--max_batch_size 2")
    refused(rc, err, target, "--variant x is given twice")
    rc, err, target = generate(worker, compiled, tmp_path, "--parameter", "K=1", "--parameter", "K=2")
    refused(rc, err, target, "--parameter K is given twice")


# ---- the rate limiter ------------------------------------------------------------------------------------

@QUICK
@given(value=st.one_of(st.just(UINT32_MAX + 1), st.integers(UINT32_MAX + 1, 2 ** 90)),
       which=st.sampled_from(["resource", "priority"]))
def test_rate_limiter_values_past_uint32_are_refused(worker, compiled, tmp_path, value, which):
    flags = ("--rate-limiter-resource", f"R:{value}") if which == "resource" else ("--rate-limiter-priority", str(value))
    rc, err, target = generate(worker, compiled, tmp_path, *flags)
    refused(rc, err, target, flags[0])


@QUICK
@given(count=st.one_of(st.just(UINT32_MAX), st.integers(0, UINT32_MAX)),
       priority=st.one_of(st.just(UINT32_MAX), st.integers(0, UINT32_MAX)))
def test_rate_limiters_within_uint32_are_written(worker, compiled, tmp_path, count, priority):
    rc, err, target = generate(worker, compiled, tmp_path, "--rate-limiter-resource", f"R:{count}",
                               "--rate-limiter-priority", str(priority))
    accepted(rc, err, target)


# ---- deploy names ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def inf2_model(compiled, tmp_path_factory) -> Path:
    from workbench import generate as gen

    folder = tmp_path_factory.mktemp("deploy") / "repo" / "add_sub"
    gen.write(gen.render(gen.GenerateSettings(triton_model_dir=str(folder), compiled_model=str(compiled),
                                              copy_compiled_model=True, target="inf2", for_other_machine=True,
                                              neuron_core_range="0:1", max_batch_size=8)))
    return folder


shell_text = st.text(alphabet=st.sampled_from(list("ab1:;$`'\" (){}|&<>\n/.-_@")), min_size=1, max_size=24)


@QUICK
@given(image=shell_text.filter(lambda t: any(c in t for c in ";$`'\" (){}|&<>\n")))
def test_images_outside_the_reference_grammar_never_reach_a_script(worker, inf2_model, tmp_path, image):
    out = _fresh(tmp_path)
    rc, _out, err = worker.cli("deploy", str(inf2_model), "--out", str(out), f"--image={image}")
    refused(rc, err, out, "docker image reference")
    rc, _out, err = worker.api(f"from workbench.deploy.recipe import recipe_for; recipe_for('inf2', image={image!r})")
    assert rc == -1 and err.startswith("RecipeError:") and "docker image reference" in err


@QUICK
@given(image=st.sampled_from(["registry.example.com:5000/team/triton:24.10-py3", "x:1", "a/b@sha256:" + "0" * 64,
                              "localhost/a_b.c-d:T_1.2"]))
def test_images_in_the_grammar_are_quoted_into_the_script(worker, inf2_model, tmp_path, image):
    out = _fresh(tmp_path)
    rc, _out, err = worker.cli("deploy", str(inf2_model), "--out", str(out), "--image", image)
    assert rc == 0, err
    script = next(out.rglob("setup-host.sh")).read_text()
    assert "docker build -t workbench/tritonserver-neuron:" in script


@QUICK
@given(sub=st.sampled_from(["../../etc", "a/../..", "/etc", "a/..", ".."]))
def test_pvc_subpaths_leaving_the_claim_are_refused(worker, inf2_model, tmp_path, sub):
    out = _fresh(tmp_path)
    rc, _out, err = worker.cli("deploy", str(inf2_model), "--out", str(out), "--kubernetes", "--repository",
                               f"pvc:claim/{sub}")
    refused(rc, err, out, "sub-path", "inside the claim")


@QUICK
@given(replicas=st.one_of(st.just(INT32_MAX + 1), st.integers(INT32_MAX + 1, 2 ** 80), st.integers(-2 ** 40, 0)),
       text=st.sampled_from(["{}", "1e20"]))
def test_replicas_past_int32_are_refused(worker, inf2_model, tmp_path, replicas, text):
    out = _fresh(tmp_path)
    rc, _out, err = worker.cli("deploy", str(inf2_model), "--out", str(out), "--kubernetes", "--repository",
                               "s3://bucket/models", "--replicas", text.format(replicas))
    refused(rc, err, out, "replicas")


@QUICK
@given(replicas=st.one_of(st.just(INT32_MAX), st.integers(1, INT32_MAX)))
def test_replicas_within_int32_are_written(worker, inf2_model, tmp_path, replicas):
    out = _fresh(tmp_path)
    rc, _out, err = worker.cli("deploy", str(inf2_model), "--out", str(out), "--kubernetes", "--repository",
                               "pvc:claim/models/v1", "--replicas", str(replicas))
    assert rc == 0, err
    manifests = next(out.rglob("*.yaml")).read_text()
    assert f"replicas: {replicas}" in manifests and "subPath: models/v1" in manifests
