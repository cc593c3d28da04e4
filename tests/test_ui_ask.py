"""The ask area (workbench/ui/ask.py) after an ask that does not end in an answer: a failed ask says
what the server answered, a cancelled one says "cancelled", neither keeps saying "answering...", and
the area takes the next prompt. Driven through its real widgets against a REAL tritonserver serving
a decoupled Python-backend model that takes the ask's body as Triton's vLLM backend does (its
inputs; max_tokens among the request parameters) and streams a word every GAP_S, and against a
port where nothing answers."""

from __future__ import annotations

import html
import re
import socket
import textwrap
import time

import pytest

from workbench.measure.engine.streaming.paced import streaming_text_config
from workbench.server.remote import RunningServer
from workbench.ui.ask import AskArea
from workbench.ui.shared_state import WorkbenchState

from served_models import serve_python_model  # tests/served_models.py

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

MODEL = "words"
GAP_S = 0.05

MODEL_PY = textwrap.dedent(f'''
    """Streams "w0 ", "w1 ", ... one every {GAP_S} s, as many as the request parameters' max_tokens."""

    import json
    import threading
    import time

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.threads = []
            self.sending = threading.Lock()

        def execute(self, requests):
            for request in requests:
                count = int(json.loads(request.parameters() or "{{}}").get("max_tokens", 16))
                thread = threading.Thread(target=self._stream, args=(request.get_response_sender(), count))
                thread.start()
                self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            return None

        def _stream(self, sender, count):
            try:
                for index in range(count):
                    time.sleep({GAP_S})
                    if sender.is_cancelled():  # the client went away
                        break
                    word = np.array([f"w{{index}} ".encode()], dtype=object)
                    with self.sending:
                        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", word)]))
            finally:
                with self.sending:
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

        def finalize(self):
            for thread in self.threads:
                thread.join(timeout=5)
''')

CONFIG = streaming_text_config([("stream", "TYPE_BOOL"), ("exclude_input_in_output", "TYPE_BOOL"),
                                ("return_logprobs", "TYPE_BOOL")])


@pytest.fixture(scope="module")
def server(tmp_path_factory, triton_server_module):
    return serve_python_model(triton_server_module, tmp_path_factory.mktemp("ask") / "repo", MODEL, CONFIG, MODEL_PY)


def _text(value: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", value))


def _area(tmp_path, server, max_tokens: int) -> AskArea:
    area = AskArea(WorkbenchState(tmp_path / "repo", name=MODEL, server=server))
    area.controls["prompt"].value = "say something"
    area.controls["max_tokens"].value = max_tokens
    return area


def _note(area: AskArea) -> str:
    return _text(area.controls["answer"].value)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(area: AskArea) -> bool:
    return not area.ops.running and not area.controls["send"].disabled and area.controls["cancel"].disabled


def test_a_failed_ask_says_why_and_the_next_ask_is_answered(server, tmp_path):
    area = _area(tmp_path, RunningServer(f"127.0.0.1:{_free_port()}", "http"), max_tokens=4)
    area.send()
    assert area.ops.join(60)
    said = _note(area)
    assert "answering" not in said and f"{MODEL}: no answer: no server answers at 127.0.0.1:" in said, said
    assert area.answer is None and _ready(area)
    # the status line says "failed (why: below)": below, the error list says it
    assert "no server answers at 127.0.0.1:" in _text(area.controls["error"].value)
    area.state.server = server  # the user connects to the right server and sends again
    area.send()
    assert area.ops.join(60)
    assert area.answer is not None and area.answer.text == "w0 w1 w2 w3 "
    assert "tokens (greedy)" in _note(area) and "no answer" not in _note(area)


def test_a_cancelled_ask_says_cancelled_keeps_what_arrived_and_takes_the_next(server, tmp_path):
    area = _area(tmp_path, server, max_tokens=200)  # 10 s of words
    area.send()
    deadline = time.monotonic() + 30
    while "w0" not in _note(area) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "answering..." in _note(area)
    area.controls["cancel"].click()
    assert area.ops.join(30) and area.ops.task.state == "cancelled"
    said = _note(area)
    assert f"{MODEL}: cancelled" in said and "answering" not in said and "w0" in said, said
    assert area.answer is None and _ready(area)
    area._arrived(MODEL, "late ")  # a piece the stream delivered after the cancel changes nothing shown
    assert _note(area) == said
    area.controls["max_tokens"].value = 2
    area.controls["send"].click()
    assert area.ops.join(60)
    assert area.answer is not None and area.answer.text == "w0 w1 " and "cancelled" not in _note(area)


def test_the_area_takes_only_streaming_llms_says_its_cap_and_clears_old_errors(server, tmp_path, triton_server_module):
    """Issue 43 item 8: a non-LLM model got Triton's raw 400; max tokens 1000 silently returned fewer;
    an empty prompt's error sat above the previous answer; an old failure stayed through a restart."""
    area = _area(tmp_path, server, max_tokens=3)
    area.send()
    assert area.ops.join(60) and area.answer is not None
    assert area.answer.text == "w0 w1 w2 " and "asked" not in _note(area)  # all that was asked came back
    area.controls["prompt"].value = "  "
    area.send()
    assert "prompt is empty" in _text(area.controls["error"].value) and area.controls["answer"].value == ""
    # a model that is not a streaming LLM is named, before anything is sent (no raw 400)
    plain = AskArea(WorkbenchState(tmp_path / "repo", name="missing_model", server=server))
    plain.controls["prompt"].value = "hello"
    plain.send()
    assert "missing_model is not loaded on this server" in _text(plain.controls["error"].value)
    assert not plain.ops.running
    # a new server: the old error goes
    plain.state.server = RunningServer(f"127.0.0.1:{_free_port()}", "http")
    assert plain.controls["error"].value == ""
