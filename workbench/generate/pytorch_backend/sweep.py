"""Sweep grids over the PyTorch backend's parameters: friendly settings -> each layout's keys, checked."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from workbench.generate.config import ModelConfig, parameter_string, parameters_of
from workbench.generate.pytorch_backend.configs import check_pytorch_config
from workbench.generate.pytorch_backend.layouts import (
    PYTORCH2,
    TORCHSCRIPT,
    PyTorchConfigError,
    layout_of,
    parameter_table,
    parse_torch_compile_parameters,
)

__all__ = [
    "SWEEP_SETTINGS",
    "sweep_variant",
    "sweep_grid",
    "variant_label",
    "parse_sweep_setting",
    "parse_backend_grid",
    "backend_grid_text",
]


# Friendly sweep settings -> parameter key per layout (None: that layout has no such switch).
SWEEP_SETTINGS: dict[str, dict[str, str | None]] = {
    "threads": {TORCHSCRIPT: "INTRA_OP_THREAD_COUNT", PYTORCH2: "NUM_THREADS"},
    "interop_threads": {TORCHSCRIPT: "INTER_OP_THREAD_COUNT", PYTORCH2: "NUM_INTEROP_THREADS"},
    "inference_mode": {TORCHSCRIPT: "INFERENCE_MODE", PYTORCH2: None},
    "optimized_execution": {TORCHSCRIPT: "DISABLE_OPTIMIZED_EXECUTION", PYTORCH2: None},
    "torch_compile": {TORCHSCRIPT: None, PYTORCH2: "TORCH_COMPILE_OPTIONAL_PARAMETERS"},
    "instance_count": {TORCHSCRIPT: None, PYTORCH2: None},
}


def _layout_key(setting: str, layout: str) -> str:
    """The parameter key of the friendly sweep ``setting`` in ``layout``; refused where it has none."""
    key = SWEEP_SETTINGS[setting][layout]
    if key is None:
        raise PyTorchConfigError(f"sweep setting {setting!r} does not exist for the {layout} layout")
    return key


def sweep_variant(base: ModelConfig, settings: Mapping[str, Any], *, name: str | None = None) -> ModelConfig:
    """A copy of ``base`` with ``settings`` applied, checked, for one sweep point.

    Keys are parameter keys of the layout (``"INTRA_OP_THREAD_COUNT": 2``) or the friendly names in
    ``SWEEP_SETTINGS``: ``threads``, ``interop_threads``, ``inference_mode`` (TorchScript),
    ``optimized_execution`` (TorchScript; False sets DISABLE_OPTIMIZED_EXECUTION), ``torch_compile``
    (PyTorch 2: True/False toggles ``disable``, a dict replaces the options) and
    ``instance_count``. ``name`` renames the variant (for loading several side by side)."""
    layout = layout_of(base)
    variant = ModelConfig()
    variant.CopyFrom(base)
    if name:
        variant.name = name
    for setting, value in settings.items():
        if setting == "instance_count":
            if len(variant.instance_group) != 1:
                raise PyTorchConfigError("instance_count needs exactly one instance_group in the base config")
            variant.instance_group[0].count = int(value)
            continue
        key = setting
        if setting in SWEEP_SETTINGS:
            key = _layout_key(setting, layout)
            if setting == "optimized_execution":
                value = not value
            if setting == "torch_compile" and not isinstance(value, Mapping):
                current = parse_torch_compile_parameters(parameters_of(variant).get(key, "{}"))
                value = {**current, "disable": not bool(value)}
        elif setting not in parameter_table(layout):
            raise PyTorchConfigError(
                f"sweep setting {setting!r} is neither a {layout} parameter ({', '.join(parameter_table(layout))}) "
                f"nor one of {', '.join(SWEEP_SETTINGS)}"
            )
        variant.parameters[key].string_value = parameter_string(value)
    return check_pytorch_config(variant)


def sweep_grid(base: ModelConfig, grid: Mapping[str, Iterable[Any]]) -> dict[str, tuple[str, ...]]:
    """``SweepPlan.parameters`` for a PyTorch-backend model: friendly settings (``threads``,
    ``torch_compile``...) become this layout's keys and every value is checked through
    ``sweep_variant`` against the user's config before the sweep starts. The keys are the same in
    the Python-backend twin, so the grid applies to the twin the local server runs. Instance counts
    belong to the sweep's allocations."""
    layout = layout_of(base)
    out: dict[str, tuple[str, ...]] = {}
    for setting, values in grid.items():
        if setting == "instance_count":
            raise PyTorchConfigError(
                "sweep instance counts with the sweep's allocations (e.g. 1x1, 2x1), not a parameter"
            )
        key = _layout_key(setting, layout) if setting in SWEEP_SETTINGS else setting
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
            values = [values]
        out[key] = tuple(parameters_of(sweep_variant(base, {setting: v}))[key] for v in values)
    return out


def variant_label(settings: Mapping[str, Any]) -> str:
    """Short, stable label for a sweep point (``threads=2,torch_compile=off``)."""

    def show(value: Any) -> str:
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, Mapping):
            return json.dumps(value, sort_keys=True, separators=(",", ":"))
        return str(value)

    return ",".join(f"{k}={show(v)}" for k, v in sorted(settings.items()))


_SWITCHES = ("inference_mode", "optimized_execution", "torch_compile")


def parse_sweep_setting(text: str) -> tuple[str, list[Any]]:
    """``"threads=1,2"`` -> ``("threads", [1, 2])``; ``"torch_compile=on,off"`` -> ``[True, False]``:
    a friendly sweep setting (``SWEEP_SETTINGS``) and its values as `sweep_grid` takes them
    (switches: on/off, true/false, 1/0; thread counts: whole numbers). A layout's own parameter
    key (``INTRA_OP_THREAD_COUNT=1,2``) keeps its values as text. PyTorchConfigError names a bad one."""
    setting, sep, values = str(text).partition("=")
    setting = setting.strip()
    items = [v.strip() for v in values.split(",")] if sep else []
    if not setting or not items or not all(items):
        raise PyTorchConfigError(f"{text!r}: write SETTING=V1,V2, e.g. threads=1,2 or torch_compile=on,off")
    if setting not in SWEEP_SETTINGS:
        return setting, items
    if setting == "instance_count":
        raise PyTorchConfigError("sweep instance counts with the sweep's allocations (e.g. 1x1, 2x1), not a parameter")
    parsed: list[Any] = []
    for item in items:
        if setting in _SWITCHES:
            word = item.lower()
            if word not in ("on", "off", "true", "false", "1", "0"):
                raise PyTorchConfigError(f"{setting}={item!r}: a switch is on or off (true/false)")
            parsed.append(word in ("on", "true", "1"))
        else:
            try:
                parsed.append(int(item))
            except ValueError:
                raise PyTorchConfigError(f"{setting}={item!r} is not a whole number of threads") from None
    return setting, parsed


def parse_backend_grid(settings: str | Iterable[str]) -> dict[str, tuple[Any, ...]]:
    """The backend grid from text: one ``"threads=1,2; inference_mode=on,off"`` (a form's field,
    settings apart by ``;``) or several items (``--backend-param``, repeated), each read by
    `parse_sweep_setting`. Blank -> ``{}``. PyTorchConfigError names a bad item or a setting given twice."""
    items = [part for part in settings.split(";") if part.strip()] if isinstance(settings, str) else list(settings)
    grid: dict[str, tuple[Any, ...]] = {}
    for item in items:
        setting, values = parse_sweep_setting(item)
        if setting in grid:
            raise PyTorchConfigError(f"{setting} is given twice; list all its values once ({setting}=V1,V2)")
        if len(set(map(str, values))) != len(values):
            raise PyTorchConfigError(f"{item.strip()!r}: a value is listed twice")
        grid[setting] = tuple(values)
    return grid


def backend_grid_text(grid: Mapping[str, Iterable[Any]]) -> str:
    """A backend grid as `parse_backend_grid` reads it back (``threads=1,2; torch_compile=on,off``)."""

    def show(value: Any) -> str:
        return ("on" if value else "off") if isinstance(value, bool) else str(value)

    return "; ".join(f"{setting}={','.join(show(v) for v in values)}" for setting, values in grid.items())
