"""An LLM sweep's flags past what the machine or the model can run are refused before anything
loads (issue 47 H2): token counts, prompts, instances, concurrency and request rates, each bounded
by memory, threads or processes, input + output tokens by the model's max_model_len, and empty
list items. Hypothesis picks values around each bound; every call runs in one worker under an
address-space and a time limit (tests/bounded_worker.py), so a value that makes the workbench
allocate or start threads by it fails the test instead of eating the machine."""

from __future__ import annotations

import pytest
from bounded_worker import worker_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm_model_dirs import vllm_model_dir

from workbench.limits import thread_count_limit
from workbench.measure.llm.sweep_limits import MAX_INSTANCES, MAX_PROMPTS, MAX_RATE, MAX_TOKENS, MIN_RATE

QUICK = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MODEL_LEN = 256  # the vLLM model directory's max_model_len (tests/vllm_model_dirs.py)
THREADS = thread_count_limit().value
_runs = iter(range(10 ** 9))


worker = worker_fixture("llm_bounds")


@pytest.fixture(scope="module")
def llm_dir(tmp_path_factory):
    return vllm_model_dir(tmp_path_factory.mktemp("llm_model"), "llm", "cpu")


def _sweep(worker, llm_dir, tmp_path, *flags: str):
    out = tmp_path / f"run{next(_runs)}"
    rc, _out, err = worker.cli("sweep", str(llm_dir), "--out", str(out), *flags)
    return rc, err, out


def _refused(rc, err, out, *words):
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("workbench sweep: error: "), err
    assert "Traceback" not in err and all(word in lines[0] for word in words), err
    assert not out.exists()


@QUICK
@given(flag=st.sampled_from(["--input-tokens", "--output-tokens"]),
       count=st.one_of(st.just(10 ** 9), st.integers(MAX_TOKENS + 1, 10 ** 30)))
def test_token_counts_past_any_context_are_refused(worker, llm_dir, tmp_path, flag, count):
    _refused(*_sweep(worker, llm_dir, tmp_path, flag, str(count)), flag, f"at most {MAX_TOKENS}")


@QUICK
@given(inputs=st.integers(1, 400), outputs=st.integers(1, 400))
def test_input_and_output_tokens_must_fit_the_models_max_model_len(worker, llm_dir, tmp_path, inputs, outputs):
    """Past max_model_len vLLM refuses the request or stops it short; at or under it the plan
    stands (refused only later, for want of a server, which is not this test's matter)."""
    rc, err, out = _sweep(worker, llm_dir, tmp_path, "--input-tokens", str(inputs), "--output-tokens", str(outputs),
                          "--url", "127.0.0.1:1")
    if inputs + outputs > MODEL_LEN:
        _refused(rc, err, out, f"--input-tokens {inputs} + --output-tokens {outputs}", f"past the model's {MODEL_LEN}",
                 "max_model_len in model.json")
    else:
        assert "past the model's" not in err and "at most" not in err, err


@QUICK
@given(count=st.one_of(st.just(10 ** 9), st.integers(MAX_PROMPTS + 1, 10 ** 25)))
def test_prompt_counts_past_the_bound_are_refused(worker, llm_dir, tmp_path, count):
    _refused(*_sweep(worker, llm_dir, tmp_path, "--prompts", str(count)), "--prompts", f"at most {MAX_PROMPTS}")


@QUICK
@given(prompts=st.integers(20_000, MAX_PROMPTS), tokens=st.integers(1_000_000, MAX_TOKENS))
def test_prompts_that_would_not_fit_in_memory_are_refused(worker, llm_dir, tmp_path, prompts, tokens):
    _refused(*_sweep(worker, llm_dir, tmp_path, "--prompts", str(prompts), "--input-tokens", str(tokens)),
             "--prompts", "GiB", "give fewer or shorter prompts")


@QUICK
@given(count=st.one_of(st.just(100_000), st.integers(MAX_INSTANCES + 1, 10 ** 20)))
def test_instances_past_the_bound_are_refused(worker, llm_dir, tmp_path, count):
    _refused(*_sweep(worker, llm_dir, tmp_path, "--instances", f"1,{count}"), f"--instances {count}",
             f"at most {MAX_INSTANCES}")


@QUICK
@given(count=st.one_of(st.just(100_000), st.integers(THREADS + 1, 10 ** 30)))
def test_concurrency_past_the_threads_the_host_can_run_is_refused(worker, llm_dir, tmp_path, count):
    _refused(*_sweep(worker, llm_dir, tmp_path, "--concurrency", str(count)), f"--concurrency {count}",
             f"at most {THREADS} requests in flight")


@QUICK
@given(rate=st.one_of(st.sampled_from(["1e308", "1e-300", "1e400", "0.0001"]),
                      st.floats(MAX_RATE * 1.001, 1e300).map(repr), st.floats(1e-300, MIN_RATE * 0.999).map(repr)))
def test_request_rates_out_of_range_are_refused(worker, llm_dir, tmp_path, rate):
    words = ["above 0"] if float(rate) == float("inf") else [f"give {MIN_RATE:g} to {MAX_RATE:g} requests per second"]
    _refused(*_sweep(worker, llm_dir, tmp_path, "--request-rate", rate), "--request-rate", *words)


@QUICK
@given(flag=st.sampled_from(["--request-rate", "--concurrency", "--instances", "--max-num-seqs"]),
       text=st.sampled_from(["1,,2", ",1", "1,", ",", "1, ,2"]))
def test_empty_list_items_are_refused_not_skipped(worker, llm_dir, tmp_path, flag, text):
    _refused(*_sweep(worker, llm_dir, tmp_path, flag, text), flag, "empty item")


@QUICK
@given(field=st.sampled_from(["prompts", "input_tokens", "instances", "concurrency", "request_rate"]),
       value=st.integers(MAX_TOKENS + 1, 10 ** 20))
def test_the_python_plan_refuses_the_same_values(worker, field, value):
    """The panel and the Python call build an LlmPlan: it refuses what the flags refuse, naming the field.
    Every value is past each field's fixed bound (below MAX_TOKENS, 16 prompts of 10**6 tokens pass
    or fail the memory rule by the machine's free memory)."""
    given_value = f"({value},)" if field in ("instances", "concurrency") else str(value)
    rc, _out, err = worker.api(f"from workbench.measure.llm import LlmPlan\nLlmPlan({field}={given_value})")
    assert rc == -1 and err.startswith("SweepError: ") and field.replace("_", " ") in err, err
