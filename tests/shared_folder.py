"""Where tests find the machine's shared folder (the upstream generator, the LibTorch backend build
script): ``$WORKBENCH_SHARED``, else ``../shared`` beside the repository root. One place, so a test
and the fixtures never disagree about which copy they use."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("WORKBENCH_SHARED") or ROOT.parent / "shared")
