"""An LLM sweep's answers on recorded rows (no server): the Pareto front, the best configuration under
SLOs, cost per million output tokens from the price table, comparisons refused across different
lengths; the variants generated and checked by the vLLM backend for a Neuron target (tensor-parallel
degrees included) and on the CPU (skipped with why); the CLI's refusals in its own flags' words.
"""

from __future__ import annotations

import json
import math

import pytest

from workbench.generate.settings import GenerateSettings
from workbench.generate.vllm_backend import VllmSettings
from workbench.measure.engine.streaming import Slo
from workbench.measure.grid.plan import SweepError
from workbench.measure.llm import LlmPlan, LlmSweepResult, compare_llm_runs, load_llm_run
from workbench.measure.llm.result import llm_frame
from workbench.measure.llm.rows import LlmRow
from workbench.measure.store.cost import CostError
from workbench.measure.store.folder import POINTS_FILE, append_point, write_record
from workbench.measure.store.plot_overlaps import text_overlaps
from workbench.measure.store.results import ResultsError, frame_from_rows, SweepResult, compare_runs, list_runs, load_run


def _row(variant: str, seqs: int, tp: int, instances: int, concurrency: int, tokens_s: float, itl50: float,
         ttft99: float, itl99: float, **extra) -> dict:
    row = LlmRow(variant=variant, max_num_seqs=seqs, tensor_parallel=tp, instances=instances, cores_per_instance=tp,
                 core_start=None, core_end=None, concurrency=concurrency, request_rate=None, input_tokens=16,
                 output_tokens=8, output_tokens_per_s=tokens_s, requests_per_s=tokens_s / 8,
                 tokens_per_user_per_s=1000.0 / itl50, ttft_p50_ms=ttft99 / 2, ttft_p90_ms=ttft99 * 0.9,
                 ttft_p99_ms=ttft99, itl_p50_ms=itl50, itl_p90_ms=itl99 * 0.9, itl_p99_ms=itl99, goodput=1.0,
                 client_output_tokens=400, server_output_tokens=400, requests=50, failures=0, stable=True)
    return {**row.to_dict(), **extra}


# tokens/s and per-user pace trade off as concurrency rises; "d" is beaten by "b" on both axes
ROWS = [
    _row("seqs1-tp1-x1", 1, 1, 1, 1, 50.0, 20.0, 100.0, 25.0),    # per user 50, total 50
    _row("seqs4-tp1-x1", 4, 1, 1, 4, 120.0, 30.0, 300.0, 40.0),   # per user 33, total 120
    _row("seqs4-tp1-x2", 4, 1, 2, 4, 200.0, 50.0, 900.0, 70.0),   # per user 20, total 200 (2 cores)
    _row("seqs1-tp1-x2", 1, 1, 2, 1, 100.0, 40.0, 200.0, 45.0),   # per user 25, total 100: dominated by seqs4-tp1-x1
]


def _result(rows=ROWS, **record) -> LlmSweepResult:
    return LlmSweepResult(llm_frame(rows), {"kind": "llm", "slo": {"ttft_ms": 500.0, "itl_ms": 50.0}, **record})


def test_the_pareto_front_holds_exactly_the_points_nothing_beats_on_both_axes():
    front = _result().pareto()
    assert list(front["variant"]) == ["seqs1-tp1-x1", "seqs4-tp1-x1", "seqs4-tp1-x2"]
    assert text_overlaps(_result().plot_pareto()) == []
    assert text_overlaps(_result().plot_latency()) == []
    by_rate = _result([dict(row, concurrency=None, request_rate=float(row["concurrency"])) for row in ROWS])
    figure = by_rate.plot_latency()
    assert figure.axes[0].get_xlabel() == "request rate (requests/s)" and text_overlaps(figure) == []


def test_the_best_configuration_under_slos_is_the_most_tokens_meeting_both_limits():
    result = _result()
    assert result.best(Slo(ttft_ms=500.0, itl_ms=50.0))["variant"] == "seqs4-tp1-x1"
    assert result.best(Slo(ttft_ms=1000.0, itl_ms=100.0))["variant"] == "seqs4-tp1-x2"
    assert result.best(Slo(ttft_ms=150.0, itl_ms=None))["variant"] == "seqs1-tp1-x1"
    assert result.best(Slo(ttft_ms=10.0, itl_ms=None)) is None
    assert "No configuration meets TTFT p99 <= 10 ms" in result.describe_best(Slo(ttft_ms=10.0, itl_ms=None))
    # goodput-based: the share of requests that met the run's SLO, recorded per point
    halved = [dict(row, goodput=0.5) if row["variant"] == "seqs4-tp1-x2" else row for row in ROWS]
    assert _result(halved).best(Slo(ttft_ms=None, itl_ms=None), min_goodput=0.99)["variant"] == "seqs4-tp1-x1"
    assert "goodput >= 99%" in _result(halved).describe_best(Slo(ttft_ms=None, itl_ms=None), min_goodput=0.99)
    # a point whose server count differs from the client's is not usable, however fast
    miscounted = _row("seqs8-tp1-x1", 8, 1, 1, 4, 999.0, 10.0, 100.0, 20.0, server_output_tokens=390)
    assert _result(ROWS + [miscounted]).best(Slo(ttft_ms=500.0, itl_ms=50.0))["variant"] == "seqs4-tp1-x1"


ON_NEURON = {"target": "inf2", "machine": {"neuron_devices": 1}}  # a run measured on an inf2 host


def test_cost_per_million_output_tokens_charges_the_share_of_the_instance_cores():
    result = _result(**ON_NEURON)
    costed = result.costed("inf2.xlarge", instance_cores=2)  # 0.76 USD/h in the price table
    one = costed.set_index("variant").loc["seqs4-tp1-x1"]
    assert math.isclose(one["usd_per_hour"], 0.76 / 2)
    assert math.isclose(one["usd_per_million_output_tokens"], 0.38 / (120.0 * 3600) * 1e6)
    # the two-instance variant pays for both cores: 0.76/h for 200 tok/s, dearer than 0.38/h for 120
    cheapest = result.cheapest("inf2.xlarge", Slo(ttft_ms=1000.0, itl_ms=100.0), instance_cores=2)
    assert cheapest["variant"] == "seqs4-tp1-x1"
    sentence = result.describe_cheapest("inf2.xlarge", Slo(ttft_ms=1000.0, itl_ms=100.0), instance_cores=2)
    assert "seqs4-tp1-x1" in sentence and "$0.8796 per million output tokens" in sentence
    with pytest.raises(CostError, match="no price for instance type 'c9.huge'"):
        result.cheapest("c9.huge")


def test_a_variant_past_the_instance_cores_is_not_priced_and_the_rest_are():
    """Two instances of two cores do not fit a 2-core instance: no cost for it, no error for the run."""
    wide = _row("seqs4-tp2-x2", 4, 2, 2, 4, 900.0, 10.0, 100.0, 20.0)
    result = _result(ROWS + [wide], **ON_NEURON)
    costed = result.costed("inf2.xlarge", instance_cores=2).set_index("variant")
    assert math.isnan(costed.loc["seqs4-tp2-x2", "usd_per_million_output_tokens"])
    assert result.cheapest("inf2.xlarge", Slo(ttft_ms=1000.0, itl_ms=100.0), instance_cores=2)["variant"] == \
        "seqs4-tp1-x1"


def test_tokens_measured_on_the_cpu_are_priced_only_as_a_cpu_instance():
    """Issue 43: CPU tokens were priced on inf2.xlarge. A CPU run (a CPU model, or no Neuron device
    here) is priced as a CPU instance type, with the price's date and source, or not at all."""
    slo = Slo(ttft_ms=1000.0, itl_ms=100.0)
    for record in ({"target": "cpu", "machine": {"neuron_devices": 2}}, {"target": "inf2", "machine": {}}):
        result = _result(**record)
        for neuron_type in ("inf2.xlarge", "trn1.2xlarge"):
            for prices in (None, {neuron_type: 0.5}):  # not with the user's own price either
                with pytest.raises(CostError, match=f"not priced as {neuron_type}: measured on the CPU"):
                    result.cheapest(neuron_type, slo, prices=prices)
                with pytest.raises(CostError, match="measured on the CPU"):
                    result.costed(neuron_type, prices=prices)
            sentence = result.describe_cheapest(neuron_type, slo)
            assert sentence.startswith(f"Cost: not priced as {neuron_type}: measured on the CPU") and "$" not in sentence
        sentence = result.describe_cheapest("m7i.large", slo)  # its 2 vCPUs: seqs4-tp1-x1 holds one
        assert sentence.startswith("Cheapest per million output tokens on m7i.large at $0.1008/h (unverified, "
                                   "2026-12-06: https://aws.amazon.com/ec2/pricing/on-demand/")
        assert f"${0.1008 / 2 / (120.0 * 3600) * 1e6:.4f} per million output tokens" in sentence
        own = result.describe_cheapest("m7i.large", slo, prices={"m7i.large": 0.2})
        assert "on m7i.large at $0.2/h (user, as given: given by the user)" in own
    neuron = _result(**ON_NEURON)
    with pytest.raises(CostError, match="not priced as m7i.large: measured on Neuron hardware"):
        neuron.cheapest("m7i.large", slo)


def test_a_response_count_is_not_taken_for_the_servers_token_count():
    """Without the token counter the server's count falls back to responses; the row says 'not known'."""
    from workbench.measure.engine.streaming.server_counts import Snapshot, counts_between

    fields = {f: 0 for f in Snapshot.__dataclass_fields__}
    counted = counts_between(Snapshot(**{**fields, "token_counter": math.nan}),
                             Snapshot(**{**fields, "token_counter": math.nan, "responses": 12}))
    assert counted.output_tokens == 12 and not counted.from_token_counter
    counted = counts_between(Snapshot(**{**fields, "token_counter": 5.0}), Snapshot(**{**fields, "token_counter": 45.0}))
    assert counted.output_tokens == 40 and counted.from_token_counter


def test_one_request_rate_is_a_plan_as_a_list_of_one_is(tmp_path):
    assert LlmPlan(request_rate=2.0).request_rate == LlmPlan(request_rate=[2.0]).request_rate == (2.0,)


def test_comparisons_refuse_runs_of_other_lengths_and_name_other_slos(tmp_path):
    base = {"input_tokens": {"mean": 16}, "output_tokens": {"mean": 8}, "engine": "workbench-stream", "settings": {}}
    folders = {}
    for name, changes in (("a", {}), ("b", {"slo": {"ttft_ms": 200.0, "itl_ms": 20.0}}),
                          ("c", {"output_tokens": {"mean": 64}})):
        folder = tmp_path / name
        folder.mkdir()
        write_record(folder, {"kind": "llm", "label": name, "slo": {"ttft_ms": 500.0, "itl_ms": 50.0},
                              **base, **changes})
        for row in ROWS:
            append_point(folder / POINTS_FILE, row)
        folders[name] = folder
    assert len(load_llm_run(folders["a"]).frame) == 4
    comparison = compare_llm_runs(folders["a"], folders["b"])
    assert len(comparison.table) == 4 and "goodput not compared" in comparison.summary()
    assert (comparison.table["output_tokens_per_s_ratio"] == 1.0).all()
    with pytest.raises(ResultsError, match="different output lengths"):
        compare_llm_runs(folders["a"], folders["c"])
    with pytest.raises(ResultsError, match="different output lengths"):  # the tensor-run call refuses alike
        compare_runs(folders["a"], folders["c"])
    with pytest.raises(ResultsError, match="one is an LLM sweep measured in tokens"):  # a tensor run: no kind
        compare_runs(folders["a"], SweepResult(frame_from_rows([]), {"label": "t"}))
    with pytest.raises(ResultsError, match="is an LLM sweep .*load_llm_run"):
        load_run(folders["a"])
    listed = list_runs(tmp_path)
    assert sorted(listed["label"]) == ["a", "b", "c"] and (listed["points"] == 4).all()
    # a damaged record is named with its line, as a tensor run's is, and a tensor run is refused by kind
    (folders["c"] / "run.json").write_text('{\n  "kind": "llm",\n  oops\n}\n')
    with pytest.raises(ResultsError, match=r"run.json line 3 is not valid JSON .*start a new run"):
        load_llm_run(folders["c"])
    (folders["c"] / "run.json").write_text('[1, 2]\n')
    with pytest.raises(ResultsError, match="line 1 is not a run record"):
        load_llm_run(folders["c"])
    (folders["c"] / "run.json").write_text('{"label": "tensor"}\n')
    with pytest.raises(ResultsError, match="is not an LLM sweep run"):
        load_llm_run(folders["c"])
    with pytest.raises(ResultsError, match="holds no sweep run"):
        load_llm_run(tmp_path / "nowhere")


def _vllm_settings(tmp_path, target: str, **vllm) -> GenerateSettings:
    from workbench import zoo

    return GenerateSettings(triton_model_dir=str(tmp_path / "repo" / "llm"), backend="vllm", target=target,
                            backend_settings=VllmSettings(model=str(zoo.tiny_llm().path), dtype="float32",
                                                          max_model_len=256, kv_cache_memory_bytes=64 << 20, **vllm))


def test_neuron_variants_are_generated_and_checked_with_their_tensor_parallel_cores(tmp_path):
    plan = LlmPlan(max_num_seqs=(2,), tensor_parallel=(1, 2, 3), instances=(1, 2), concurrency=(1,),
                   core_range="0:3")
    variants = {v.label: v for v in plan.variants(_vllm_settings(tmp_path, "trn2"))}
    two = variants["seqs2-tp2-x2"]
    assert two.skipped is None and str(two.core_range) == "0:3"
    assert json.loads(two.files["1/model.json"])["tensor_parallel_size"] == 2
    assert two.config["instance_group"][0]["count"] == 2
    assert two.config["parameters"]["REPORT_CUSTOM_METRICS"]["string_value"] == "true"
    assert json.loads(two.files["1/model.json"])["disable_log_stats"] is False
    assert "4 attention heads" in variants["seqs2-tp3-x1"].skipped  # vLLM's rule: heads split evenly
    assert variants["seqs2-tp1-x2"].skipped is None and str(variants["seqs2-tp1-x2"].core_range) == "0:1"


def test_cpu_variants_over_the_numa_nodes_are_skipped_with_why(tmp_path):
    plan = LlmPlan(max_num_seqs=(1, 4), tensor_parallel=(1, 2), instances=(1, 2), concurrency=(1,))
    variants = {v.label: v for v in plan.variants(_vllm_settings(tmp_path, "cpu"), numa=1)}
    assert len(variants) == 8
    assert variants["seqs4-tp1-x2"].skipped is None and variants["seqs4-tp1-x2"].config["instance_group"][0]["count"] == 2
    assert "NUMA node" in variants["seqs4-tp2-x1"].skipped and variants["seqs4-tp2-x1"].files  # generated all the same
    assert [p.key for p in plan.points(variants["seqs1-tp1-x1"])] == [("seqs1-tp1-x1", 1, None)]
    with pytest.raises(SweepError, match="core range 0:1: it places NeuronCores"):
        LlmPlan(core_range="0:1").variants(_vllm_settings(tmp_path, "cpu"))


@pytest.mark.parametrize("kwargs, message", [
    ({"max_num_seqs": "1,x"}, "max_num_seqs"),
    ({"concurrency": (2,), "request_rate": "1"}, "not both"),
    ({"request_rate": "0"}, "above 0"),
    ({"output_tokens": 0}, "output tokens 0"),
    ({"slo": Slo(ttft_ms=-1.0)}, "SLO ttft_ms"),
])
def test_a_bad_plan_is_refused_naming_the_field(kwargs, message):
    with pytest.raises(SweepError, match=message):
        LlmPlan(**kwargs)


@pytest.fixture(scope="module")
def llm_dir(tmp_path_factory):
    from workbench.generate import backends

    settings = _vllm_settings(tmp_path_factory.mktemp("llm_cli"), "cpu", max_num_seqs=4)
    backends.write(backends.render(settings))
    return settings.model_dir


@pytest.mark.parametrize("flags, words", [
    (["--batch-sizes", "4"], "--batch-sizes is for tensor models' sweeps"),
    (["--max-num-seqs", "1,x"], "--max-num-seqs"),
    (["--concurrency", "2", "--request-rate", "1"], "give --concurrency or --request-rate, not both"),
    (["--url", "127.0.0.1:1", "--url", "127.0.0.1:2"], "an LLM sweep runs on one server"),
    (["--engine", "perf_analyzer"], "--engine perf_analyzer"),
    (["--core-range", "0:1"], "--core-range 0:1 places NeuronCores"),
    (["--slo-ttft-ms", "0"], "--slo-ttft-ms 0"),
    (["--instance-type", "c9.huge"], "no price for instance type 'c9.huge'"),
    (["--instance-type", "inf2.xlarge"], "--instance-type not priced as inf2.xlarge: measured on the CPU"),
    (["--search", "halving"], "--search halving is for tensor models' sweeps; an LLM sweep takes --search grid"),
    (["--search", "adaptive", "--max-windows", "2"], "--max-windows 2: with --search adaptive, max_windows 2 must be"),
])
def test_the_cli_refuses_bad_llm_flags_before_starting_anything(llm_dir, tmp_path, capsys, flags, words):
    from workbench.cli import main

    out = tmp_path / "run"
    assert main(["sweep", str(llm_dir), "--out", str(out), *flags]) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


def test_the_cli_refuses_llm_flags_on_a_tensor_model(generate_cpu_model, tmp_path, capsys):
    from workbench.cli import main

    model_dir = generate_cpu_model(tmp_path)
    assert main(["sweep", str(model_dir), "--max-num-seqs", "4", "--out", str(tmp_path / "run")]) == 2
    assert "--max-num-seqs is for vLLM-backend models" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_fan_out_is_refused_in_words_before_anything_loads(tmp_path):
    from workbench.measure.llm import run_llm_sweep

    with pytest.raises(SweepError, match="an LLM sweep runs on one server"):
        run_llm_sweep(LlmPlan(), [object(), object()], tmp_path / "llm", out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_cli_measures_with_the_llm_defaults_unless_window_flags_are_given(tmp_path):
    """Left alone, `workbench sweep`'s window flags are the tensor sweep's; an LLM sweep then measures
    as the Python call and the panel do (LLM_SETTINGS), so their runs compare."""
    from workbench.cli import build_parser
    from workbench.cli.llm_sweep import llm_settings
    from workbench.measure.llm.run import LLM_SETTINGS

    parser = build_parser("sweep")
    args = parser.parse_args(["sweep", str(tmp_path), "--out", str(tmp_path / "run")])
    settings = llm_settings(args, args.flag_defaults)
    assert (settings.window_s, settings.stable_windows, settings.max_windows, settings.time_limit_s) == \
        (LLM_SETTINGS.window_s, LLM_SETTINGS.stable_windows, LLM_SETTINGS.max_windows, LLM_SETTINGS.time_limit_s)
    args = parser.parse_args(["sweep", str(tmp_path), "--out", str(tmp_path / "run"), "--window-ms", "1500",
                              "--max-windows", "3", "--time-limit-s", "4"])
    settings = llm_settings(args, args.flag_defaults)
    assert (settings.window_s, settings.max_windows, settings.time_limit_s) == (1.5, 3, 4.0)
    assert settings.stable_windows == LLM_SETTINGS.stable_windows


def test_per_user_is_the_users_share_of_the_total_and_says_so():
    """Issue 43: "per user" 289 tokens/s read beside a total of 190 at concurrency 1 (a request's own
    pace, leaving out the time between a user's requests). Per user is now total / concurrency, with
    a request rate a request's pace; the table's titles carry both definitions."""
    from workbench.measure.llm.rows import PER_USER_MEANING, per_user_rate
    from workbench.measure.store.table import readable_table

    assert per_user_rate(190.0, 1, 289.0) == 190.0  # one user: the total, not the request's own pace
    assert per_user_rate(300.0, 4, 120.0) == 75.0
    assert per_user_rate(50.0, None, 150.0) == 150.0  # a request rate: no fixed users, a request's pace
    columns = {c.title: c.meaning for c in readable_table(llm_frame(ROWS)).columns}
    assert PER_USER_MEANING in columns["per user"] and "total" in columns["output"]


def test_a_streamed_check_and_the_sweeps_point_agree_or_say_why_not():
    """Issue 43: notebook 09's streamed check read 351.5 tokens/s, its sweep 99.6 for the same
    setting, with no word on it. The sentence gives both with their intervals, and where they do not
    overlap, where the time went (the check's own figures beside the sweep row's)."""
    from types import SimpleNamespace

    from workbench.tutorial.llm import stream_against_sweep

    def check(rate, low, high):  # the StreamResult fields the sentence reads
        return SimpleNamespace(concurrency=1, output_tokens_per_s=rate, output_tokens_per_s_low=low,
                               output_tokens_per_s_high=high, itl_ms={"p50": 2.64}, ttft_ms={"p50": 13.2})

    result = _result([dict(ROWS[0], output_tokens_per_s_low=40.0, output_tokens_per_s_high=60.0)])
    agree = stream_against_sweep(check(55.0, 45.0, 65.0), result, "seqs1-tp1-x1")
    assert "streamed check 55.0 tokens/s (45.0-65.0), sweep 50.0 (40.0-60.0)" in agree and "agree" in agree
    apart = stream_against_sweep(check(250.0, 214.3, 283.8), result, "seqs1-tp1-x1")
    assert "do not overlap" in apart and "inter-token latency p50 2.64 ms in the check against 20.00 ms" in apart
    assert "no point of seqs4-tp1-x9" in stream_against_sweep(check(1.0, 0.5, 1.5), result, "seqs4-tp1-x9")
