"""A ground truth for token load generators: a decoupled Python-backend model that streams words on
a schedule it is given, with a rare slow start and rare slow gaps, so that every figure a client
reports (TTFT and ITL percentiles, goodput under an SLO, tokens/s) has a known right answer.

The schedule repeats every ``cycle`` requests, counted by the model in arrival order: most start
after ``first_ms`` and keep ``gap_ms`` between words; ``slow_starts`` of them start after
``slow_first_ms``; ``slow_streams`` start on time but alternate the two ``slow_gaps_ms``. The
model takes the vLLM backend's inputs (``text_input``, ``stream``, ``sampling_parameters`` with
``max_tokens``; ``return_num_output_tokens`` accepted and ignored: each response is one word) and
counts every word it sends on Triton's /metrics (``token_metric``), as the vLLM backend counts
its generation tokens. Calibrate with it: ``write_paced_model`` into a repository, serve it, and
read back `PacedSchedule`'s figures.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.measure.engine.stats import percentile

__all__ = ["PACED_TOKEN_METRIC", "PacedSchedule", "write_paced_model"]

PACED_TOKEN_METRIC = "paced_output_tokens_total"


@dataclass(frozen=True)
class PacedSchedule:
    """The schedule (times in ms) and the figures it implies, for requests of ``tokens`` words."""

    tokens: int = 17
    first_ms: float = 80.0
    gap_ms: float = 20.0
    slow_first_ms: float = 300.0
    slow_gaps_ms: tuple[float, float] = (50.0, 70.0)
    cycle: int = 20
    slow_starts: int = 2
    slow_streams: int = 2

    def _requests(self) -> list[tuple[float, float]]:
        """(TTFT, ITL: the mean gap) of each request of one cycle, in order."""
        out = []
        for place in range(self.cycle):
            first = self.slow_first_ms if self._slow_start(place) else self.first_ms
            gaps = self.slow_gaps_ms if self._slow_stream(place) else (self.gap_ms, self.gap_ms)
            mean_gap = float(np.mean([gaps[k % 2] for k in range(1, self.tokens)])) if self.tokens > 1 else math.nan
            out.append((first, mean_gap))
        return out

    def _slow_start(self, place: int) -> bool:
        normal = self.cycle - self.slow_starts - self.slow_streams
        return normal <= place < normal + self.slow_starts

    def _slow_stream(self, place: int) -> bool:
        return place >= self.cycle - self.slow_streams

    def ttft_ms(self, q: float) -> float:
        """TTFT percentile ``q`` over one cycle (nearest rank)."""
        return percentile(sorted(r[0] for r in self._requests()), q)

    def itl_ms(self, q: float) -> float:
        """A request's ITL (its mean gap), percentile ``q`` over one cycle (nearest rank)."""
        return percentile(sorted(r[1] for r in self._requests()), q)

    def e2e_ms(self) -> list[float]:
        return [first + itl * (self.tokens - 1) for first, itl in self._requests()]

    def goodput(self, ttft_ms: float | None, itl_ms: float | None) -> float:
        """The share of requests meeting the SLO (TTFT and ITL at most the limits)."""
        met = [(ttft_ms is None or t <= ttft_ms) and (itl_ms is None or i <= itl_ms) for t, i in self._requests()]
        return sum(met) / len(met)

    def cycle_s(self, concurrency: int = 1) -> float:
        """Seconds one cycle takes at ``concurrency`` requests in flight (no client overhead)."""
        return sum(self.e2e_ms()) / 1000 / concurrency


def write_paced_model(repo: Path, name: str, schedule: PacedSchedule, token_metric: str = PACED_TOKEN_METRIC) -> Path:
    """The model ``name`` in repository ``repo`` (``config.pbtxt`` and ``1/model.py``); its folder."""
    folder = Path(repo) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(_CONFIG)
    (folder / "1" / "model.py").write_text(
        _MODEL.format(
            first=schedule.first_ms / 1000,
            slow_first=schedule.slow_first_ms / 1000,
            gap=schedule.gap_ms / 1000,
            slow_gaps=tuple(g / 1000 for g in schedule.slow_gaps_ms),
            cycle=schedule.cycle,
            normal=schedule.cycle - schedule.slow_starts - schedule.slow_streams,
            slow_starts=schedule.slow_starts,
            tokens=schedule.tokens,
            metric=token_metric,
        )
    )
    return folder


def streaming_text_config(optional_inputs: Sequence[tuple[str, str]]) -> str:
    """The config.pbtxt of a decoupled Python-backend text model with vLLM's ``text_input`` and
    ``text_output`` and the optional inputs ``(name, data type)`` it reads."""
    inputs = ['{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }']
    inputs += [f'{{ name: "{name}" data_type: {dtype} dims: [ 1 ] optional: true }}' for name, dtype in optional_inputs]
    listed = ",\n  ".join(inputs)
    return (
        'backend: "python"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n'
        f"input [\n  {listed}\n]\n"
        'output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )


_CONFIG = streaming_text_config(
    [("stream", "TYPE_BOOL"), ("sampling_parameters", "TYPE_STRING"), ("return_num_output_tokens", "TYPE_BOOL")]
)

_MODEL = textwrap.dedent('''
    """Streams words on a schedule repeating every {cycle} requests (workbench's paced model)."""

    import json
    import threading
    import time

    import numpy as np
    import triton_python_backend_utils as pb_utils

    FIRST, SLOW_FIRST, GAP, SLOW_GAPS = {first!r}, {slow_first!r}, {gap!r}, {slow_gaps!r}
    CYCLE, NORMAL, SLOW_STARTS, TOKENS = {cycle}, {normal}, {slow_starts}, {tokens}


    class TritonPythonModel:
        def initialize(self, args):
            self.family = pb_utils.MetricFamily(name="{metric}", description="words streamed",
                                                kind=pb_utils.MetricFamily.COUNTER)
            self.sent = self.family.Metric(labels={{"model": args["model_name"], "version": args["model_version"]}})
            self.arrived = 0
            self.threads = []
            self.sending = threading.Lock()  # one send at a time (the stub's shared memory)

        def execute(self, requests):
            for request in requests:
                received = time.perf_counter()
                raw = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
                params = json.loads(raw.as_numpy().reshape(-1)[0]) if raw is not None else {{}}
                place = self.arrived % CYCLE
                self.arrived += 1
                first = SLOW_FIRST if NORMAL <= place < NORMAL + SLOW_STARTS else FIRST
                gaps = SLOW_GAPS if place >= NORMAL + SLOW_STARTS else (GAP, GAP)
                thread = threading.Thread(target=self._stream, args=(
                    request.get_response_sender(), received, int(params.get("max_tokens", TOKENS)), first, gaps))
                thread.start()
                self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            return None

        def _stream(self, sender, received, count, first, gaps):
            at = received + first
            for index in range(count):
                if index:
                    at += gaps[index % 2]
                wait = at - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                word = np.array([f"w{{index}} ".encode()], dtype=object)
                with self.sending:
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", word)]))
                    self.sent.increment(1)
            with self.sending:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

        def finalize(self):
            for thread in self.threads:
                thread.join(timeout=5)
''')
