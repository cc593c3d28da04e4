"""The LLM sweep kind: how its runs read back (`store.kinds`), registered as ``llm`` in
``workbench/measure/__init__.py``."""

from __future__ import annotations

from pathlib import Path

from workbench.measure.llm.result import LlmSweepResult, read_llm_run
from workbench.measure.store.run_record import RunRecord


class _LlmKind:
    name = "llm"
    result_type = LlmSweepResult

    def load(self, path: Path, record: RunRecord) -> LlmSweepResult:
        return read_llm_run(path, record)


KIND = _LlmKind()
