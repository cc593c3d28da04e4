"""The run record: one typed, versioned value, read from every format on disk and written back."""

from __future__ import annotations

import json

import pytest

from workbench.measure.store.folder import RECORD_FILE, ResultsError, read_record, write_record
from workbench.measure.store.run_record import RECORD_VERSION, RunRecord

# A tensor sweep's run.json as the workbench wrote it before the record was typed (no version, no kind).
VERSION_1_TENSOR = {
    "label": "old", "model": "mlp", "model_dir": "/repo/mlp", "started": "2026-01-01T00:00:00Z", "ended": None,
    "status": "complete", "plan": {"batch_sizes": [1]}, "planned_points": 2,
    "settings": {"model": "mlp", "window_s": 1.0}, "engine": {"engine": "workbench", "reason": "built in"},
    "seed": 0, "variants": {"1x1": {}}, "sessions": [{"status": "complete", "measured": 2, "reused": 0}],
    "search": {"strategy": "adaptive"}, "some_future_key": {"kept": True},
}
# An LLM sweep's: its engine is a name, its meaning keys sit at the top level.
VERSION_1_LLM = {"kind": "llm", "label": "llm", "model": "tiny", "status": "failed", "input_tokens": 16,
                 "output_tokens": 8, "slo": {"ttft_ms": 500.0}, "engine": "workbench-stream", "effort": None,
                 "prompts": 4, "sessions": []}


def test_a_version_1_record_reads_as_a_typed_one_and_writes_back_every_key(tmp_path):
    (tmp_path / RECORD_FILE).write_text(json.dumps(VERSION_1_TENSOR))
    record = read_record(tmp_path)
    assert isinstance(record, RunRecord)
    assert (record.version, record.kind, record.status, record.label) == (1, "tensor", "complete", "old")
    assert record.search == {"strategy": "adaptive"} and record.engine["engine"] == "workbench"
    assert record.extra == {"some_future_key": {"kept": True}}
    write_record(tmp_path, record)
    written = json.loads((tmp_path / RECORD_FILE).read_text())
    assert written["version"] == RECORD_VERSION and written["kind"] == "tensor"
    assert {k: v for k, v in written.items() if k not in ("version", "kind")} == VERSION_1_TENSOR


def test_an_llm_record_keeps_its_own_fields_and_reads_as_the_mapping_it_was(tmp_path):
    write_record(tmp_path, VERSION_1_LLM)
    record = read_record(tmp_path)
    assert (record.kind, record.engine, record.input_tokens, record.slo) == ("llm", "workbench-stream", 16,
                                                                             {"ttft_ms": 500.0})
    # notebooks read it as a dict: keys, [], get, dict() and ** all still work
    assert record["status"] == "failed" and record.get("settings", "none") == "none"
    assert dict(record, label="b")["label"] == "b" and {**record}["prompts"] == 4
    assert "search" not in record and "kind" in record


@pytest.mark.parametrize("text, why", [("[1, 2]", "line 1 is not a run record"), ("{\n  \"a\": ", "line 2"),
                                       ('{"sessions": 3}', "is not a run record")])
def test_a_damaged_record_names_its_file(tmp_path, text, why):
    (tmp_path / RECORD_FILE).write_text(text)
    with pytest.raises(ResultsError, match=why) as err:
        read_record(tmp_path)
    assert str(tmp_path / RECORD_FILE) in str(err.value)


def test_the_points_a_bound_decided_read_back_typed_and_older_records_have_none(tmp_path):
    from workbench.measure.store.bounded import BoundedPoint

    version_2 = {**VERSION_1_TENSOR, "version": 2, "kind": "tensor"}
    (tmp_path / RECORD_FILE).write_text(json.dumps(version_2))  # as a version-2 workbench wrote it
    record = read_record(tmp_path)
    assert record.version == 2 and record.bounded is None and "bounded" not in record
    point = BoundedPoint("1x1", 4, 2, "throughput", ("1x1", 8, 8), 437.1, 528.3,
                         "throughput at most 437.1 infer/s, below 1x2's", after_step=3)
    write_record(tmp_path, record.with_changes(bounded=[point]))
    written = json.loads((tmp_path / RECORD_FILE).read_text())
    assert written["version"] == RECORD_VERSION == 3
    assert written["bounded"] == [{"variant": "1x1", "batch_size": 4, "concurrency": 2, "bound": "throughput",
                                   "by": {"variant": "1x1", "batch_size": 8, "concurrency": 8}, "value": 437.1,
                                   "limit": 528.3, "reading": "throughput at most 437.1 infer/s, below 1x2's",
                                   "after_step": 3}]
    assert read_record(tmp_path).bounded == [point]
    with pytest.raises(ValueError, match="bound 'latency' is not one of throughput, p99"):
        BoundedPoint("1x1", 4, 2, "latency", ("1x1", 8, 8), 1.0, 2.0, "", 0)
