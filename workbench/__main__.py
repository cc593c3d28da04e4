"""`python -m workbench`: the same commands as the `workbench` script."""

import sys

from workbench.cli import main

sys.exit(main())
