"""One interpreter under an address-space limit (RLIMIT_AS) that runs `workbench` command lines and
API snippets on request, each answered within a time limit: property tests drive hostile values
through it, so a value that makes the workbench allocate or loop by it fails the test instead of
eating the machine or hanging the suite."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEMORY_LIMIT = 1536 * 2 ** 20  # the worker's whole address space; the workbench needs ~200 MB here
TIME_LIMIT_S = 60.0  # one call; the slowest refusal (a generate that traces nothing) takes seconds

_WORKER = textwrap.dedent("""
    import contextlib, io, json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
    from workbench.cli import main
    for line in sys.stdin:
        request = json.loads(line)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if "argv" in request:
                    rc = main(request["argv"])
                else:
                    scope = {{}}
                    exec(request["code"], scope)
                    rc = 0
            except SystemExit as exit:
                rc = exit.code
            except Exception as error:  # an API refusal: its type and one line
                rc, err = -1, io.StringIO(f"{{type(error).__name__}}: {{error}}")
        print(json.dumps([rc, out.getvalue(), err.getvalue()]), flush=True)
""")


class Worker:
    """The bounded interpreter: ``cli(*argv)`` and ``api(code)`` answer (exit code, stdout, stderr);
    an API call's exception is rc -1 and ``Type: message``. A call past ``time_limit_s`` kills the
    worker and fails the test; so does one that dies (memory past ``memory_limit``)."""

    def __init__(self, cwd: Path, memory_limit: int = MEMORY_LIMIT, time_limit_s: float = TIME_LIMIT_S) -> None:
        self.cwd, self.memory_limit, self.time_limit_s = cwd, memory_limit, time_limit_s
        self.process = self._start()

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", _WORKER.format(limit=self.memory_limit)], cwd=self.cwd,
                                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"},
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def _ask(self, request: dict) -> tuple[int, str, str]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], self.time_limit_s)
        if not ready:
            self.process.kill()
            self.process.wait(30)
            self.process = self._start()  # the next example gets a fresh worker
            raise AssertionError(f"no answer within {self.time_limit_s:g} s to {request}")
        answer = self.process.stdout.readline()
        assert answer, f"the worker died (rc {self.process.poll()}) on {request}: memory past its limit?"
        rc, out, err = json.loads(answer)
        return rc, out, err

    def cli(self, *argv: str) -> tuple[int, str, str]:
        return self._ask({"argv": list(argv)})

    def api(self, code: str) -> tuple[int, str, str]:
        return self._ask({"code": code})

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def worker_fixture(folder: str, **limits):
    """A module-scoped pytest fixture of one `Worker` started in a fresh ``folder`` (``limits``:
    ``memory_limit``, ``time_limit_s``), closed after the module: ``worker = worker_fixture("x")``."""
    import pytest

    @pytest.fixture(scope="module")
    def worker(tmp_path_factory):
        started = Worker(tmp_path_factory.mktemp(folder), **limits)
        yield started
        started.close()

    return worker
