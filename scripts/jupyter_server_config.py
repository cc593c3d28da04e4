"""The Jupyter server settings `bash dev.sh lab` starts Lab with (``--config`` this file).

- Saving a tutorial notebook strips its outputs by the repository's rule (scripts/strip_notebooks.py:
  outputs only in ``# NBVAL_CHECK_OUTPUT`` cells, no widget state), so Run All + save, or autosave,
  leaves ``git status`` clean. Notebooks elsewhere are saved untouched.
- The URL Lab prints opens the quickstart (also with ``--no-browser``); the file browser starts at
  the repository root, where the README is.
"""

import importlib.util
import sys
import warnings
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_NAME = "workbench_strip_notebooks"  # one module however often the loader reads this file
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, _ROOT / "scripts" / "strip_notebooks.py")
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])
_rule = sys.modules[_NAME]

# jupyter_server warns when the loader sets the hook a second time (it reads config more than once)
warnings.filterwarnings("ignore", message="Overriding existing pre_save_hook")
c = get_config()  # noqa: F821 (provided by the config loader)
c.FileContentsManager.pre_save_hook = _rule.pre_save_hook
c.ServerApp.root_dir = str(_ROOT)
c.LabApp.default_url = "/lab/tree/notebooks/01-quickstart.ipynb"
