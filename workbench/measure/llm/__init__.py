"""LLM sweeps, measured in tokens: the vLLM backend's max_num_seqs x tensor-parallel degree x
instances x concurrency (or request rate), each variant loaded into one running server, each point
measured by the streaming engine and saved as a row in the run folder; the answers people ask of
it (Pareto front of tokens/s per user against total tokens/s, best configuration under SLOs,
cheapest per million output tokens) and their plots.

Modules: ``plan`` (the grid, variants generated and checked by the vLLM backend), ``rows`` (the
row), ``run`` (`run_llm_sweep`: the LLM kind the shared runner drives), ``answers`` (the rules), ``result`` (`LlmSweepResult`, saved runs,
comparisons), ``kind`` (how its runs read back), ``report_sections`` (its part of `workbench report`),
``plots``, ``cli`` (``workbench sweep``'s LLM mode). ``workbench sweep`` and the
sweep panel reach it through the backend switch: a model whose backend streams tokens
(`generate.backends.Backend.streams_tokens`) is swept here.

    from workbench.measure.llm import LlmPlan, run_llm_sweep
    from workbench.measure.engine.streaming import Slo
    plan = LlmPlan(max_num_seqs=(1, 4), concurrency=(1, 4), input_tokens=16, output_tokens=8,
                   slo=Slo(ttft_ms=500, itl_ms=50))
    result = run_llm_sweep(plan, server, "model_repository/tiny_llm", out_dir="runs/llm")
    result.pareto(); result.best(); result.cheapest("inf2.xlarge"); result.plot_pareto()
"""

from workbench.lazy import lazy_getattr

# loaded on first use: `workbench sweep` registers the LLM flags (llm/cli.py) without pandas
_NAMES = {
    "LlmPlan": "workbench.measure.llm.plan",
    "LlmPoint": "workbench.measure.llm.plan",
    "LlmVariant": "workbench.measure.llm.plan",
    "LlmRow": "workbench.measure.llm.rows",
    "LLM_COLUMNS": "workbench.measure.llm.rows",
    "LlmSweepResult": "workbench.measure.llm.result",
    "LlmComparison": "workbench.measure.llm.result",
    "compare_llm_runs": "workbench.measure.llm.result",
    "load_llm_run": "workbench.measure.llm.result",
    "run_llm_sweep": "workbench.measure.llm.run",
    "LLM_SETTINGS": "workbench.measure.llm.run",
    "LlmSearch": "workbench.measure.llm.slo_effort",
}
__all__ = list(_NAMES)
__getattr__ = lazy_getattr(__name__, _NAMES, globals())
