"""The tiny LLM from settings to a served answer in a real JupyterLab and Chromium (issue 33).

A person picks "vLLM backend (LLMs)" and the zoo's tiny LLM in the settings tab, sees a bad
max_model_len refused beside its field, reads 1/model.json in the preview and writes it, starts
the server (which says Triton's vLLM backend served it), asks a prompt and reads the answer, then
sweeps it in tokens in the sweep tab and reads the best and cheapest configuration and the Pareto
front (issue 34). The
answer shown must be vLLM's offline greedy output for that prompt and model.json (its text and
its token ids), computed here in the vLLM environment (`check_generate.offline_greedy`).

One server start, in a lab started as the README's `bash dev.sh lab` starts it, in a user's
environment (issue 43: the app could serve the LLM only with variables no message named, which this
test's fixture used to give it): the app finds the vLLM environment the README's commands set up
(the checkout's .venv-vllm) and the backend the shared folder's script assembles for it, as notebook
09 does (workbench/server/vllm_env.py). `test_the_lab_and_its_kernel_have_nothing_a_user_lacks`
holds the fixture to that. Skips, saying why, without the shared folder's script or the checkout's
vLLM environment.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from app_page import button, open_tab, running_servers, workbench_of  # tests/browser/app_page.py
from conftest import given_beyond_a_user  # tests/browser/conftest.py

from workbench import zoo
from workbench.served_generation import engine_args, offline_greedy
from workbench.server.vllm_backend import SERVED_AS_VLLM
from workbench.server.vllm_env import VLLM_VENV

pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(1200)]

NOTEBOOK = "vllm.ipynb"
MODEL = "tiny_llm"
MAX_TOKENS = 12
WAIT_MS = 180_000
LOAD_MS = 600_000  # the server's start plus a vLLM engine load (~25-45 s here, minutes on a busy machine)


@pytest.fixture(scope="module")
def llm():
    return zoo.tiny_llm()


@pytest.fixture(scope="module")
def lab_root(tmp_path_factory, vllm_python, vllm_backend_dir, llm):
    """A scratch folder with a notebook showing the workbench; the checkout's vLLM environment must
    be there, as `bash dev.sh test` (or lab) leaves it: nothing else tells the app where it is."""
    if not (VLLM_VENV / "bin" / "python").is_file():
        pytest.skip(f"no vLLM environment in the checkout ({VLLM_VENV}): bash dev.sh test sets it up")
    root = tmp_path_factory.mktemp("vllm_app")
    cells = [nbformat.v4.new_code_cell("from workbench.ui import Workbench\n"
                                       "app = Workbench(repository='model_repository')\napp")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), root / NOTEBOOK)
    return root


def _control(workbench, kind: str, label: str):
    """The ``kind`` element (input, select, textarea) of the visible widget labelled ``label``."""
    return workbench.locator(".widget-inline-hbox:visible").filter(
        has=workbench.page.locator(f"label:text-is('{label}')")).locator(kind).first


def _type(workbench, label: str, value: str) -> None:
    field = _control(workbench, "input", label)
    field.fill(value)
    field.press("Enter")  # text fields send their value on Enter


def test_the_lab_and_its_kernel_have_nothing_a_user_lacks(lab, page):
    """The lab this module's app runs in, and the kernel the app runs in, hold nothing beyond a
    user's environment but Jupyter's own folders and the checkout on PYTHONPATH (conftest's
    `LAB_ISOLATION`): no workbench variable, no vLLM environment or backend handed over."""
    import psutil

    lab.run_all(page, NOTEBOOK, WAIT_MS)
    kernels = [p.pid for p in psutil.Process(lab.process.pid).children(recursive=True)
               if "ipykernel" in " ".join(p.cmdline())]
    assert kernels, "the notebook's kernel did not start"
    for pid in (lab.process.pid, *kernels):
        assert given_beyond_a_user(pid) == {}


def test_tiny_llm_from_settings_to_a_served_answer(lab, lab_root, page, llm, vllm_python, tmp_path):
    console: list[str] = []
    page.on("pageerror", lambda err: console.append(f"page error: {err}"))
    lab.run_all(page, NOTEBOOK, WAIT_MS, wait=False)
    workbench = workbench_of(page)
    workbench.locator(".widget-tab").first.wait_for(timeout=WAIT_MS)

    # settings: the vLLM backend and the zoo's tiny LLM
    open_tab(workbench, "settings")
    _type(workbench, "model name", MODEL)
    _control(workbench, "select", "Triton backend").select_option(label="vLLM backend (LLMs)")
    _control(workbench, "select", "model").select_option(label="the zoo's tiny LLM (seeded, built here)")
    folder = _control(workbench, "input", "model folder")
    page.wait_for_function("el => el.value.includes('tiny-llm')", arg=folder.element_handle(), timeout=WAIT_MS)
    assert folder.input_value() == str(llm.path)

    # a max_model_len past the model's positions: refused beside the field, in its label's words
    _type(workbench, "max_model_len", "9999")
    error = workbench.get_by_text("max_model_len 9999 is past the model's 512 positions").first
    error.wait_for(timeout=WAIT_MS)
    field_box = _control(workbench, "input", "max_model_len").bounding_box()
    error_box = error.bounding_box()
    assert 0 <= error_box["y"] - (field_box["y"] + field_box["height"]) < 40, (field_box, error_box)
    assert abs(error_box["x"] - field_box["x"]) < 250, (field_box, error_box)  # under it, not across the page
    for label, value in (("max_model_len", "256"), ("max_num_seqs", "4"), ("KV cache bytes", str(64 << 20))):
        _type(workbench, label, value)
    error.wait_for(state="detached", timeout=10_000)
    _control(workbench, "select", "dtype").select_option("float32")
    workbench.locator(".widget-checkbox:visible", has_text="enforce_eager").locator("input").first.check()
    _control(workbench, "input", "model folder").scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "settings.png"))  # what the user sees (path printed below)

    # preview: config.pbtxt and 1/model.json, the diff against the (empty) disk, then the write
    open_tab(workbench, "preview")
    open_tab(workbench, "1/model.json")
    engine_view = workbench.locator(".widget-html:visible", has_text='"max_model_len"').first
    engine_view.wait_for(timeout=WAIT_MS)
    page.wait_for_function("el => el.innerText.includes('\"enforce_eager\": true')",
                           arg=engine_view.element_handle(), timeout=WAIT_MS)
    assert f"served here by {SERVED_AS_VLLM}" in engine_view.inner_text()
    open_tab(workbench, "diff")
    workbench.get_by_text("does not exist yet: everything is new").first.wait_for(timeout=WAIT_MS)
    open_tab(workbench, "config.pbtxt")
    button(workbench, "write model directory").click()
    model_dir = lab_root / "model_repository" / MODEL
    workbench.get_by_text(re.compile(rf"^wrote \S*model_repository/{MODEL}$")).first.wait_for(timeout=WAIT_MS)
    args = engine_args(model_dir)
    assert args == {"model": str(llm.path), "dtype": "float32", "max_model_len": 256, "max_num_seqs": 4,
                    "tensor_parallel_size": 1, "enforce_eager": True, "kv_cache_memory_bytes": 64 << 20}
    assert 'backend: "vllm"' in (model_dir / "config.pbtxt").read_text()

    # vLLM's offline greedy answer for these engine arguments (before the server: the CPU is shared)
    prompt = llm.prompts[0]
    offline = offline_greedy(vllm_python, args, [prompt], MAX_TOKENS)

    try:
        # server: one start, which loads the model written above; the table says who served it
        open_tab(workbench, "server")
        button(workbench, "start server").click()
        workbench.get_by_text(f"vLLM models: {SERVED_AS_VLLM} at").first.wait_for(timeout=WAIT_MS)
        workbench.locator("td", has_text="READY").first.wait_for(timeout=LOAD_MS)
        assert workbench.locator("td", has_text=f"{SERVED_AS_VLLM} (vLLM {offline.vllm_version})").count() == 1

        # ask: the answer shown is vLLM's offline greedy output, text and tokens
        workbench.locator(".widget-textarea:visible", has=page.locator("label:text-is('prompt')")).locator(
            "textarea").first.fill(prompt)
        _type(workbench, "max tokens", str(MAX_TOKENS))
        button(workbench, "Send").click()
        note = workbench.locator(".workbench-answer-note:visible", has_text="tokens (greedy)").first
        note.wait_for(timeout=WAIT_MS)
        shown = workbench.locator(".workbench-answer-text:visible").first.inner_text()
        ids = tuple(int(t) for t in re.findall(r"\d+", note.inner_text().split("(greedy):", 1)[1]))
        print(f"\nasked {prompt!r}: shown {shown!r}, offline {offline.texts[0]!r} (vLLM {offline.vllm_version}, "
              f"offline engine load {offline.load_seconds:.1f} s)")
        note.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "server.png"))
        print(f"screenshots: {tmp_path}")
        assert ids == offline.token_ids[0] and len(ids) == MAX_TOKENS
        assert shown == offline.texts[0] and shown.strip()
        log = workbench.locator(".workbench-log:visible").first.inner_text()
        assert "EngineCore" in log and "\x1b[" not in log  # vLLM's own lines, as text (no colour codes)

        # sweep: the tab holds the LLM sweep for this model; its best, cheapest and Pareto front are shown
        open_tab(workbench, "sweep")
        for label, value in (("max seqs", "4"), ("concurrency", "1,2"), ("input tokens", "8"),
                             ("output tokens", "8"), ("window (s)", "0.5"), ("max windows", "3"),
                             ("time limit (s)", "3")):
            _type(workbench, label, value)
        workbench.get_by_text("2 point(s)").first.wait_for(timeout=WAIT_MS)
        button(workbench, "run LLM sweep").click()
        # measured on this CPU: priced as a CPU instance with the price's date and source, never as Neuron
        cheapest = workbench.get_by_text(re.compile(r"^Cheapest per million output tokens on m7i\.large at "
                                                    r"\$0\.1008/h \(unverified, 2026-12-06: https://")).first
        cheapest.wait_for(timeout=LOAD_MS)
        answer = workbench.locator(".widget-html:visible", has_text="Best (highest").first.inner_text()
        assert "Best (highest output tokens/s with TTFT p99 <= 500 ms and ITL p99 <= 50 ms" in answer
        assert not re.search(r"inf[12]\.|trn[12]", answer), answer
        offered = _control(workbench, "select", "price as").locator("option").all_inner_texts()
        assert offered and not any(re.match(r"inf|trn", name) for name in offered), offered
        header = workbench.locator(".workbench-table:visible thead").first.inner_text()
        assert "tokens (client)" in header and "tokens (server)" in header and "TTFT p99 (ms)" in header
        counts = workbench.locator(".workbench-table:visible").first.evaluate("""table => {
            const titles = [...table.querySelectorAll('thead th')].map(th => th.innerText);
            const client = titles.indexOf('tokens (client)'), server = titles.indexOf('tokens (server)');
            return [...table.querySelectorAll('tbody tr')].map(tr => [tr.cells[client].innerText, tr.cells[server].innerText]);
        }""")
        assert len(counts) == 2 and all(c == s and int(c) > 0 for c, s in counts), counts  # the server's own count
        pareto = workbench.locator(".widget-tab:visible img:visible").first
        page.wait_for_function("img => img.naturalWidth > 300", arg=pareto.element_handle(), timeout=WAIT_MS)
        cheapest.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "sweep.png"))
        assert console == []
    finally:
        open_tab(workbench, "server")
        stop = button(workbench, "stop server")
        if stop.is_enabled():
            stop.click()
            workbench.get_by_text("not running").first.wait_for(timeout=WAIT_MS)
    assert running_servers(lab_root) == []
