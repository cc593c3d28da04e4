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


def test_sweep_ray_refuses_an_llm_model_in_one_line(tmp_path, capsys):
    """A vLLM-backend model is swept in tokens on one server: --ray says so rather than being ignored."""
    from workbench.cli import main

    model = tmp_path / "repo" / "tiny_llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { count: 1, kind: KIND_MODEL } ]\n')
    (model / "1" / "model.json").write_text('{"model": "facebook/opt-125m"}')
    code = main(["sweep", str(model), "--concurrency", "1", "--out", str(tmp_path / "run"), "--ray"])
    assert code == 2
    assert "--ray measures tensor models; an LLM (vLLM-backend) sweep runs on one server" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
