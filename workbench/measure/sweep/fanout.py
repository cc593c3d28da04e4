"""A sweep fanned out over several running tritonservers (one per host or instance type).

The plan's variants are dealt round-robin to the servers, in plan order, and the deal is kept in
the run record, so a resume gives every server the same share. Each server's share is an ordinary
`run_sweep` run in ``<out>/servers/<name>/`` measured by its own thread (one point at a time per
server; the servers in parallel), so each share is resumed on its own: points measured there are
kept, and a resume may name only the servers that still have work. The shares are merged into one
run in ``<out>`` (``points.jsonl``, ``run.json``, the exports) whose every row names its server.
"""

from __future__ import annotations

import re
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.files import atomic_write
from workbench.measure.engine.engines import EngineChoice, choose_engine
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import SweepError, SweepPlan, plan_variants
from workbench.measure.grid.rows import now
from workbench.measure.store.folder import points_text
from workbench.measure.store.results import (
    POINTS_FILE,
    RECORD_FILE,
    RunRecord,
    SweepResult,
    frame_from_rows,
    load_run,
    write_exports,
    write_record,
)
from workbench.measure.sweep import run_sweep
from workbench.measure.sweep.swept import base_config, check_out_dir, reference_for
from workbench.served_outputs import Eager, InputMaker
from workbench.server.protocol import Server
from workbench.server.remote import endpoint_addresses

__all__ = ["SERVERS_FOLDER", "deal_variants", "run_fanout"]

SERVERS_FOLDER = "servers"


def deal_variants(labels: Sequence[str], servers: Sequence[str]) -> dict[str, list[str]]:
    """Variant labels dealt round-robin to ``servers``: neighbours in the plan (often the same
    allocation at another setting) land on different servers, and every share differs by at most one."""
    if not servers:
        raise SweepError("a fan-out needs at least one server")
    shares: dict[str, list[str]] = {name: [] for name in servers}
    for i, label in enumerate(labels):
        shares[servers[i % len(servers)]].append(label)
    return shares


def _named(servers: Mapping[str, Server] | Sequence[Server]) -> dict[str, Server]:
    if isinstance(servers, Mapping):
        named = {str(k): v for k, v in servers.items()}
    else:
        named = {}
        for server in servers:
            name = server.name
            if name in named:
                raise SweepError(f"server {name!r} is given twice")
            named[name] = server
    if not named:
        raise SweepError("a fan-out needs at least one server")
    _refuse_one_server_twice(named)
    return named


def _refuse_one_server_twice(named: Mapping[str, Server]) -> None:
    """Two names for one server (``127.0.0.1:P`` and ``grpc://localhost:P``) would load variants
    over each other and measure the same host twice: refused, naming both."""
    seen: dict[tuple[str, int], str] = {}
    for name, server in named.items():
        for address in _addresses(server):
            if address in seen and seen[address] != name:
                raise SweepError(
                    f"servers {seen[address]!r} and {name!r} are the same server "
                    f"({address[0]} port {address[1]}); give each server once"
                )
            seen[address] = name


def _addresses(server: Server) -> set[tuple[str, int]]:
    """Every (address, port) the server is reached at (a remote one answers on one protocol)."""
    found: set[tuple[str, int]] = set()
    for endpoint in ("http_url", "grpc_url"):
        try:
            url = server.http_url if endpoint == "http_url" else server.grpc_url
        except ValueError:  # a remote server given on the other protocol
            continue
        found |= endpoint_addresses(url)
    return found


def _folder(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "server"


def _write_points(out_dir: Path, rows: list[dict]) -> None:
    """The merged points.jsonl, replaced in one step (the shares' own files are the durable ones)."""
    atomic_write(out_dir / POINTS_FILE, points_text(rows))


def run_fanout(
    plan: SweepPlan,
    servers: Mapping[str, Server] | Sequence[Server],
    model: str | Path,
    *,
    out_dir: str | Path,
    settings: MeasureSettings | None = None,
    reference: Eager | None = None,
    inputs: InputMaker | None = None,
    resume: bool = False,
    label: str | None = None,
    restore: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
) -> SweepResult:
    """Measure ``plan`` on several servers at once (``{name: server}``, or servers named by their
    ``name``/URL), as `run_sweep` does on one: same arguments, each server's model left as it was.

    Returns the merged run (status ``complete`` when every share is; ``cancelled`` or ``failed``
    otherwise, with each server's outcome and error in ``record["servers"]``).
    """
    named = _named(servers)
    out_dir = Path(out_dir)
    has_run = check_out_dir(out_dir, resume)
    first = next(iter(named.values()))
    _, base, model_dir = base_config(first, model)
    # made once for every share: the same engine measures all points, one model loaded in-process
    choice = choose_engine(MeasureSettings() if settings is None else settings)
    reference = reference_for(model_dir) if reference is None else reference
    labels = [v.label for v in plan_variants(plan, base)]
    previous = load_run(out_dir).record if has_run else {}
    if previous:
        shares = {name: list(entry["variants"]) for name, entry in previous.get("servers", {}).items()}
        unknown = sorted(set(named) - set(shares))
        if unknown or sorted(sum(shares.values(), [])) != sorted(labels):
            raise SweepError(
                f"cannot resume the fan-out in {out_dir}: it dealt {len(labels)} variant(s) to "
                f"{sorted(shares)}; resume with the same plan and (some of) those servers"
                + (f", not {unknown}" if unknown else "")
            )
    else:
        shares = deal_variants(labels, list(named))
    folders = {name: _folder(name) for name in shares}
    if len(set(folders.values())) != len(folders):
        raise SweepError(f"server names {sorted(shares)} do not give distinct folder names; name them apart")
    out_dir.mkdir(parents=True, exist_ok=True)

    total = sum(len(shares[name]) for name in shares) * len(plan.batch_sizes) * len(plan.concurrency)
    done: dict[str, int] = {}
    lock = threading.Lock()
    outcomes: dict[str, dict] = {}

    def report(name: str) -> Callable[[int, int, str], None]:
        def share_progress(count: int, _total: int, message: str) -> None:
            with lock:
                done[name] = count
                if progress is not None:
                    progress(sum(done.values()), total, f"{name}: {message}")

        return share_progress

    def measure_share(name: str) -> None:
        share_dir = out_dir / SERVERS_FOLDER / folders[name]
        try:
            result = run_sweep(
                plan,
                named[name],
                model,
                out_dir=share_dir,
                settings=settings,
                reference=reference,
                inputs=inputs,
                resume=resume and (share_dir / RECORD_FILE).exists(),
                label=f"{label or out_dir.name} on {name}",
                restore=restore,
                progress=report(name),
                cancel=cancel,
                variants=shares[name],
                engine=choice,
            )
            outcomes[name] = {"status": result.status}
        except Exception as err:  # one server failing does not stop the others
            outcomes[name] = {
                "status": "failed",
                "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc(limit=5),
            }

    started = now()
    if not previous:  # the deal goes on disk first: a crash mid-way resumes with the same shares
        previous = {
            "kind": "fanout",
            "label": label or out_dir.name,
            "started": started,
            "status": "running",
            "plan": plan.to_dict(),
            "planned_points": total,
            "servers": {n: {"variants": v, "folder": f"{SERVERS_FOLDER}/{folders[n]}"} for n, v in shares.items()},
        }
        write_record(out_dir, previous)
    threads = [
        threading.Thread(target=measure_share, args=(name,), name=f"fanout-{name}", daemon=True)
        for name in named
        if shares[name]
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return _merge(out_dir, plan, shares, folders, outcomes, previous, label, started, total, choice)


def _merge(
    out_dir: Path,
    plan: SweepPlan,
    shares: dict[str, list[str]],
    folders: dict[str, str],
    outcomes: dict[str, dict],
    previous: Mapping[str, Any],
    label: str | None,
    started: str,
    total: int,
    choice: EngineChoice,
) -> SweepResult:
    """One run from the shares: every row with its server, the record naming each server's share."""
    runs = {
        name: load_run(out_dir / SERVERS_FOLDER / folders[name])
        for name in shares
        if (out_dir / SERVERS_FOLDER / folders[name] / RECORD_FILE).exists()
    }
    rows: list[dict] = []
    servers: dict[str, dict] = {}
    for name, variants in shares.items():
        entry = dict(previous.get("servers", {}).get(name, {}))
        entry.update({"variants": variants, "folder": f"{SERVERS_FOLDER}/{folders[name]}"})
        if name in runs:
            share = runs[name]
            rows += [
                {**row, "server": name}
                for row in share.frame.astype(object).where(share.frame.notna(), None).to_dict("records")
            ]
            entry.update({"server": share.record.server, "status": share.status, "sessions": share.record.sessions})
        elif not variants:
            entry["status"] = "complete"
        entry.pop("error", None)
        entry.pop("traceback", None)
        entry.update(outcomes.get(name, {}))
        servers[name] = entry
    statuses = {entry.get("status") for entry in servers.values()}
    status = "complete" if statuses <= {"complete"} else "failed" if "failed" in statuses else "cancelled"
    first_share = next(iter(runs.values())).record if runs else {}
    record = {
        key: first_share[key]
        for key in ("model", "model_dir", "settings", "seed", "base_config", "machine", "packages")
        if key in first_share
    }
    record.update(
        {
            "kind": "fanout",
            "engine": choice.to_dict(),
            "label": label or previous.get("label") or out_dir.name,
            "started": previous.get("started") or started,
            "ended": now(),
            "status": status,
            "plan": plan.to_dict(),
            "planned_points": total,
            "servers": servers,
            "variants": {k: v for run in runs.values() for k, v in (run.record.variants or {}).items()},
            "sessions": previous.get("sessions", [])
            + [{"started": started, "ended": now(), "status": status, "servers": sorted(outcomes)}],
        }
    )
    _write_points(out_dir, rows)
    write_record(out_dir, record)
    frame = frame_from_rows(rows)
    write_exports(out_dir, frame, record)
    return SweepResult(frame, RunRecord.from_dict(record), out_dir)
