"""Triton 2.51 waits for ever on a python-backend stub that missed its one-second health beat while
starting (here: the stub paused 2.5 s in its initialize, as a starved machine does). The load's `StubWatch` ends that
stub and the load is sent once more; a load that meets it twice fails, saying so, and the server
goes on serving."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from workbench.server import ModelLoadError
from workbench.server.stub_watch import STUB_ENDED_NOTE, stubs_of_model

pytestmark = [pytest.mark.server, pytest.mark.timeout(180)]

CONFIG = """backend: "python"
max_batch_size: 0
input [{name: "X", data_type: TYPE_FP32, dims: [1]}]
output [{name: "Y", data_type: TYPE_FP32, dims: [1]}]
instance_group [{kind: KIND_CPU, count: 1}]
"""
MODEL = """import os
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # the stub's health beat runs from here on: the marker says when a pause hangs the load
        open(os.path.join(args["model_repository"], f"initializing-{os.getpid()}"), "w").close()
        time.sleep(2.0)  # a slow start: long enough to be paused in

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
"""


@pytest.fixture
def repo(tmp_path):
    for name in ("slow", "twice"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(CONFIG)
        (tmp_path / name / "1" / "model.py").write_text(MODEL)
    return tmp_path


@contextlib.contextmanager
def pausing(model_dir: Path, times: int) -> Iterator[list[int]]:
    """While open, pause each stub of the model in ``model_dir`` (up to ``times``) for 2.5 s once it
    is in its initialize (its marker file written), where Triton beats its health each second;
    yields the pids paused."""
    stop, paused = threading.Event(), []

    def pause() -> None:
        while len(paused) < times and not stop.is_set():
            new = {int(f.name.split("-")[1]) for f in model_dir.glob("initializing-*")} - set(paused)
            if not new:
                time.sleep(0.02)
                continue
            pid = new.pop()
            os.kill(pid, signal.SIGSTOP)
            paused.append(pid)
            time.sleep(2.5)
            os.kill(pid, signal.SIGCONT)

    pauser = threading.Thread(target=pause)
    pauser.start()
    try:
        yield paused
    finally:
        stop.set()
        pauser.join()


def answer(server, model: str, x: float) -> list[float]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url)
    try:
        sent = httpclient.InferInput("X", [1], "FP32")
        sent.set_data_from_numpy(np.array([x], dtype=np.float32))
        return client.infer(model, [sent]).as_numpy("Y").tolist()
    finally:
        client.close()


def test_a_stub_triton_gave_up_on_is_ended_and_the_load_sent_again(repo, triton_server):
    server = triton_server(repo)
    with pausing(repo / "slow", 1) as paused:
        started = time.monotonic()
        server.load("slow", timeout=120)
        took = time.monotonic() - started
    assert len(paused) == 1 and not Path(f"/proc/{paused[0]}").exists()  # the paused stub was ended
    (serving,) = stubs_of_model(server.pid, "slow")
    assert serving != paused[0] and took < 60
    # the server's log says what the workbench did, where a person reads why a load took longer
    assert any(f"ended stub(s) [{paused[0]}] of 'slow'" in line and "loading again" in line for line in server.log_tail(200))
    assert answer(server, "slow", 3.0) == [3.0]


def test_a_load_that_meets_it_twice_fails_saying_so_and_the_server_goes_on(repo, triton_server):
    server = triton_server(repo)
    with pausing(repo / "twice", 2) as paused, pytest.raises(ModelLoadError) as failed:
        server.load("twice", timeout=120)
    assert len(paused) == 2 and STUB_ENDED_NOTE in str(failed.value)
    assert not stubs_of_model(server.pid, "twice")
    server.load("slow", timeout=120)  # the server is well: the next load is served
    assert answer(server, "slow", 1.0) == [1.0]
