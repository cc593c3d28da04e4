"""How one load level is measured: `MeasureSettings` (settings.py), the built-in load generator for
fixed-shape requests (loadgen/), Triton's perf_analyzer as the other engine (perf_analyzer.py and
perf_analyzer_output.py), the choice between them (engines.py), the server statistics arithmetic
(stats.py), and ``streaming/``, which measures decoupled (token-streaming) models in tokens."""
