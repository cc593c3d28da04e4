"""The Jupyter server settings `bash dev.sh lab` starts Lab with (``--config`` this file).

- The URL Lab prints opens the quickstart (also with ``--no-browser``); the file browser starts at
  the repository root, where the README is.
- A saved notebook keeps what its reader saved, outputs and all: git's clean filter
  (scripts/strip_notebooks.py, set up by dev.sh) strips a tutorial where git reads it, and the
  post-save hook tells git's index a saved tutorial's new size when its stripped content is
  unchanged, so ``git status`` stays clean after Run All + save.
"""

import importlib.util
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_NAME = "workbench_strip_notebooks"  # one module however often the loader reads this file
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, _ROOT / "scripts" / "strip_notebooks.py")
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])

c = get_config()  # noqa: F821 (provided by the config loader)
c.FileContentsManager.post_save_hook = sys.modules[_NAME].post_save_hook
c.ServerApp.root_dir = str(_ROOT)
c.LabApp.default_url = "/lab/tree/notebooks/01-quickstart.ipynb"
