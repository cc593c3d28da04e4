"""`import workbench` stays light and its public names resolve to the modules of their concern."""

import subprocess
import sys


def _run_python(code: str) -> str:
    """``code`` in a fresh interpreter (so sys.modules shows what it imported); its stdout."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_is_light_and_names_resolve():
    code = (
        "import sys, workbench\n"
        "assert 'torch' not in sys.modules and 'tritonclient' not in sys.modules, sorted(sys.modules)\n"
        "from workbench.compiler import compile_model\n"
        "assert workbench.compile is compile_model\n"
        "for name in workbench.__all__: getattr(workbench, name)\n"
        "print('ok')\n"
    )
    assert _run_python(code).strip() == "ok"


def test_a_subcommand_loads_only_what_it_needs():
    """`workbench generate` must not pay for torch, which only the quickstart's module imports."""
    code = (
        "import sys\n"
        "from workbench.cli import main\n"
        "try:\n"
        "    main(['generate', '--help'])\n"
        "except SystemExit as done:\n"
        "    assert done.code == 0\n"
        "assert 'torch' not in sys.modules, 'generate --help imported torch'\n"
        "print('ok')\n"
    )
    out = _run_python(code)
    assert out.strip().endswith("ok") and "--triton_model_dir" in out


def test_deploy_and_doctor_help_load_no_framework():
    """`workbench deploy` and `workbench doctor` import torch/TensorFlow only when a check runs."""
    code = (
        "import sys\n"
        "from workbench.cli import main\n"
        "for command in ('deploy', 'doctor'):\n"
        "    try:\n"
        "        main([command, '--help'])\n"
        "    except SystemExit as done:\n"
        "        assert done.code == 0\n"
        "assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules, 'a --help imported a framework'\n"
        "print('ok')\n"
    )
    out = _run_python(code)
    assert out.strip().endswith("ok") and "--kubernetes" in out and "--framework" in out
