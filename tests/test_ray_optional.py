"""Ray is optional: without it the workbench imports, and `workbench sweep --ray` says in one line
how to install it, before anything is measured or written."""

from __future__ import annotations

import subprocess
import sys

BLOCK_RAY = "import sys; sys.modules['ray'] = None; "  # `import ray` raises ImportError, as where it is absent


def test_without_ray_the_workbench_imports_and_sweep_ray_says_how_to_install_it(tmp_path, generate_cpu_model):
    model = generate_cpu_model(tmp_path / "m")
    out = tmp_path / "run"
    code = (BLOCK_RAY + "from workbench.cli import main; import workbench.measure.cluster; "
            f"sys.exit(main(['sweep', {str(model)!r}, '--batch-sizes', '1', '--allocations', '1x1', "
            f"'--out', {str(out)!r}, '--ray']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert lines == ["workbench sweep: error: Ray is not installed here: pip install "
                     "'triton-neuron-workbench[ray]' (ray==2.60.0)"]
    assert not out.exists()
