"""Where tests find the machine's shared folder (the upstream generator, the LibTorch backend build
script): ``$WORKBENCH_SHARED``, else ``../shared`` beside the repository root. One place, so a test
and the fixtures never disagree about which copy they use."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("WORKBENCH_SHARED") or ROOT.parent / "shared")

# Variables tests/conftest.py's pytest_configure sets for the test session (the shared folder's tools),
# which a user's shell does not have: the browser tier's Lab starts without them (tests/browser/conftest.py).
SET_FOR_THE_TESTS: list[str] = []
# Where the controller names them for its xdist workers, which inherit the variables themselves.
SET_MARK = "WORKBENCH_SET_FOR_THE_TESTS"
