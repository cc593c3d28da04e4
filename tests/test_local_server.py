"""The bundled local tritonserver is an extra: what happens without it, and where its numpy cap bites.

The cap is measured, not copied: under numpy 2.4.6 the nvidia-pytriton 0.7.0 stub read every FP32 input as
zeros and answered with empty outputs (docs/install-matrix.md), so the workbench refuses that pairing
before starting a server that would serve wrong numbers.
"""

import os
import subprocess
import sys

FIND = (
    "from workbench.server.discovery import find_tritonserver, TritonNotFoundError\n"
    "try:\n    find_tritonserver()\nexcept TritonNotFoundError as e:\n    print(e)\nelse:\n    print('FOUND')\n"
)


def _run(code, tmp_path, pythonpath=()):
    env = {k: v for k, v in os.environ.items() if k != "TRITONSERVER"}
    env["PATH"] = str(tmp_path)  # no tritonserver on PATH
    env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def test_no_server_anywhere_says_how_to_get_one(tmp_path):
    out = _run("import sys; sys.modules['pytriton'] = None\n" + FIND, tmp_path)
    assert out.startswith("no tritonserver found. Tried:")
    assert "[local-server]" in out and "Triton container" in out and "$TRITONSERVER" in out


def test_the_wheel_with_numpy_2_is_refused_before_any_server_starts(tmp_path):
    """A numpy 2 distribution first on sys.path (its real metadata file, as pip writes it) beside the
    installed nvidia-pytriton: discovery names both versions and the two ways out."""
    dist = tmp_path / "site" / "numpy-2.4.6.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 2.4.6\n")
    out = _run(FIND, tmp_path, [tmp_path / "site"])
    assert "needs numpy<2" in out and "numpy 2.4.6" in out and "nvidia-pytriton 0.7.0" in out
    assert "Triton container" in out


def test_the_wheel_is_found_with_this_environments_numpy_only_if_it_is_numpy_1(tmp_path):
    """The real numpy of this environment: 1 (dev.sh's local-server extra) finds the wheel; 2 (a core-only
    environment with the wheel added) is refused."""
    import numpy

    out = _run(FIND, tmp_path)
    if int(numpy.__version__.split(".")[0]) < 2:
        assert out == "FOUND"
    else:
        assert "needs numpy<2" in out and f"numpy {numpy.__version__}" in out
