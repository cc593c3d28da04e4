"""check_served_generation's own rules, without a server or vLLM (tests/test_vllm_served.py runs
it against the real vLLM backend)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from workbench.served_generation import Offline, _token_ids, check_served_generation, engine_args
from workbench.server.ports import find_free_port


def test_token_ids_come_from_the_sampled_token_of_each_position():
    logprobs = json.dumps([{"419": {"logprob": -5.2, "rank": 1}}, {"16": {"logprob": -5.3, "rank": 1}}])
    assert _token_ids(logprobs) == [419, 16]
    assert _token_ids("null") == []
    with pytest.raises(ValueError, match="only the sampled token"):
        _token_ids(json.dumps([{"1": {}, "2": {}}]))


def test_engine_args_are_read_from_model_json(tmp_path):
    with pytest.raises(ValueError, match="cannot read the vLLM engine arguments"):
        engine_args(tmp_path)
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.json").write_text('{"dtype": "float32"}')
    with pytest.raises(ValueError, match='"model" key'):
        engine_args(tmp_path)
    (tmp_path / "1" / "model.json").write_text('{"model": "/m", "dtype": "float32"}')
    assert engine_args(tmp_path) == {"model": "/m", "dtype": "float32"}


def test_a_server_that_does_not_answer_fails_each_row_by_name(tmp_path):
    port = find_free_port()
    server = SimpleNamespace(http_url=f"127.0.0.1:{port}", grpc_url=f"127.0.0.1:{port}")
    offline = Offline(((5, 6),), ("x",), "0.32.0", 1.0)
    check = check_served_generation(server, "m", tmp_path, ["a prompt"], max_tokens=2, offline=offline,
                                    protocols=("http", "http_stream"))
    assert not check.ok and len(check.rows) == 2 and all(row.error for row in check.rows)
    assert "2 of 2 generations of 'm' differ" in check.summary() and "'a prompt'" in check.summary()
    with pytest.raises(ValueError, match="unknown protocol"):
        check_served_generation(server, "m", tmp_path, ["p"], offline=offline, protocols=("smoke",))
    with pytest.raises(ValueError, match="pass python="):
        check_served_generation(server, "m", tmp_path, ["p"])
