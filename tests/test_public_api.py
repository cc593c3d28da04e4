"""`import workbench` stays light and its public names resolve to the modules of their concern."""

import subprocess
import sys


def test_import_is_light_and_names_resolve():
    code = (
        "import sys, workbench\n"
        "assert 'torch' not in sys.modules and 'tritonclient' not in sys.modules, sorted(sys.modules)\n"
        "from workbench.compiler import compile_model\n"
        "assert workbench.compile is compile_model\n"
        "for name in workbench.__all__: getattr(workbench, name)\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
