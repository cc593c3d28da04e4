"""Streaming load for decoupled (token-streaming) models, measured in tokens.

``measure_stream`` puts one load point on a model served by Triton with a decoupled transaction
policy (the vLLM backend, or any model shaped like it: ``text_input``, ``stream``,
``sampling_parameters`` in, ``text_output`` streamed out) over gRPC streaming or HTTP
generate_stream, and reports per request TTFT, every inter-token gap, end-to-end latency and
token counts; per point output tokens/s, requests/s, TTFT / ITL percentiles and goodput under
SLOs, with the client's CPU per token and the server's own counts beside the client's.

The seams: ``prompts`` (exact-length prompts from the model's tokenizer), ``clients`` (the two
wires), ``load`` (the plan, the windows), ``results`` (what comes back), ``server_counts`` (the
server's side).
"""

from workbench.measure.engine.streaming.load import DEFAULT_SLOS, StreamPlan, measure_stream
from workbench.measure.engine.streaming.prompts import (
    Lengths,
    ModelTokenizer,
    Prompt,
    Tokenizer,
    WordTokenizer,
    build_prompts,
)
from workbench.measure.engine.streaming.server_counts import VLLM_TOKEN_METRIC
from workbench.measure.engine.streaming.stream_results import RequestRecord, ServerCounts, Slo, StreamResult

__all__ = [
    "measure_stream",
    "StreamPlan",
    "DEFAULT_SLOS",
    "Lengths",
    "Prompt",
    "Tokenizer",
    "WordTokenizer",
    "ModelTokenizer",
    "build_prompts",
    "RequestRecord",
    "ServerCounts",
    "Slo",
    "StreamResult",
    "VLLM_TOKEN_METRIC",
]
