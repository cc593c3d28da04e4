"""Reports of hostile or huge runs (issue 47 item 4): names, labels and parameters holding ``$...$``
are drawn letter for letter, never as mathtext (which failed the whole figure); a 20,000-point run
renders in bounded time with sampled plots and the full table. Each case runs in a worker under an
address-space and a time limit (tests/bounded_worker.py)."""

from __future__ import annotations

import json
import re

from bounded_worker import worker_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.measure.store.plots import MAX_PLOTTED_POINTS

_WRITE_RUN = '''
import random
from pathlib import Path
from workbench.measure.grid.rows import PointRow
from workbench.measure.store.folder import points_text, write_record
out, n, name, variant = Path({out!r}), {n}, {name!r}, {variant!r}
out.mkdir(parents=True)
rng = random.Random(0)
rows = []
for i in range(n):
    v, b, c = i % 100, (i // 100) % 20 + 1, i // 2000 + 1
    base = PointRow(variant=variant.format(v=v), allocation=f"{{v % 4 + 1}}x1", instances=1, cores_per_instance=1,
                    core_start=0, core_end=0, batching="dyn", parameters=variant.format(v=v), batch_size=b,
                    concurrency=c).__dict__
    rows.append({{**base, "throughput": rng.uniform(10, 1000), "p50_ms": 5.0, "p90_ms": 6.0,
                 "p99_ms": rng.uniform(5, 50), "mean_ms": 5.5, "stable": rng.random() > 0.1, "outputs_ok": True,
                 "compute_infer_ms": 1.0, "queue_ms": 0.1, "model": name, "config_digest": "d"}})
(out / "points.jsonl").write_text(points_text(rows))
write_record(out, {{"model": name, "label": name, "status": "complete"}})
'''

NAMES = st.one_of(st.sampled_from(["$x$", "$\\\\frac{", "a$b", "$$", "\\\\$", "$\\\\alpha_{1}$ ok", "cost $5 {v}"]),
                  st.text(alphabet="$\\\\{}_^ab1", min_size=1, max_size=10))


worker = worker_fixture("reports", memory_limit=3 * 2 ** 30, time_limit_s=240)


_runs = iter(range(10 ** 9))


def _svg_texts(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", svg) for svg in re.findall(r"<svg.*?</svg>", html, re.S))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES, variant=NAMES)
def test_names_with_dollars_are_drawn_letter_for_letter(worker, tmp_path, name, variant):
    """Model name, run label, variant and parameters with ``$``: the report renders, and the
    plots' text shows the name as typed (svg.fonttype none keeps text as text)."""
    import html as html_module

    out = tmp_path / f"run{next(_runs)}"
    variant_text = variant.replace("{", "{{").replace("}", "}}") + " {v}"
    rc, _o, err = worker.api(_WRITE_RUN.format(out=str(out), n=12, name=name, variant=variant_text))
    assert rc == 0, err
    rc, _o, err = worker.cli("report", str(out), "--out", str(out / "report.html"))
    assert rc == 0 and "Traceback" not in err, err
    page = (out / "report.html").read_text()
    shown = html_module.unescape(_svg_texts(page))
    assert f"{name}: throughput against p99 latency" in shown, shown[:500]


def test_a_20000_point_run_reports_in_bounded_time_with_every_row_in_the_table(worker, tmp_path):
    out = tmp_path / "big"
    rc, _o, err = worker.api(_WRITE_RUN.format(out=str(out), n=20_000, name="big", variant="v{v}"))
    assert rc == 0, err
    rc, _o, err = worker.cli("report", str(out), "--out", str(out / "report.html"))  # 240 s at most (measured 33)
    assert rc == 0, err
    page = (out / "report.html").read_text()
    assert page.count("<tr") >= 20_000  # the table keeps every point
    assert f"{MAX_PLOTTED_POINTS} highest-throughput of 20000 points" in _svg_texts(page)
    lines = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    assert len(lines) == 20_000  # the run itself untouched
