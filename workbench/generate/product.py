"""What every backend produces: a `GeneratedModel` (files in memory, before writing) and a
`ReadBack` (a model directory on disk -> the settings that regenerate it).

Both backends (`python_backend`, `pytorch_backend`) build these and nothing else, so the CLI, the
panels and the notebooks preview, diff, write and re-read a model the same way whichever backend
made it. `kept_text` is the one rule for a config's text: an unchanged hand-edited file is kept
byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from workbench.coremap import CoreMap
from workbench.generate.config import ConfigError, ModelConfig, from_text, to_text
from workbench.generate.repository import Changes, FileContent, compare_model_dir
from workbench.generate.settings import GenerateSettings
from workbench.spec import ModelSpec

__all__ = ["GeneratedModel", "ReadBack", "kept_text"]


@dataclass
class GeneratedModel:
    """Everything a generation produces, before it is written. ``variants`` holds the
    ``configs/<name>.pbtxt`` configs (tritonserver ``--model-config-name=<name>``). ``model_py`` is
    the source shown as the model's code (the Python backend's model.py; a PyTorch 2 module's
    source; "" when there is none). ``core_map`` is None for a backend that places nothing on
    cores (Triton's PyTorch backend)."""

    settings: GenerateSettings
    dest: Path
    spec: ModelSpec
    config: ModelConfig
    config_text: str
    model_py: str
    core_map: CoreMap | None
    files: dict[str, FileContent]
    warnings: list[str]
    variants: dict[str, ModelConfig] = field(default_factory=dict)
    shown: tuple[str, ...] = ()  # further text files the dry run prints (e.g. the vLLM backend's model.json)
    core_notes: tuple[str, ...] = ()  # lines under the core map (e.g. each instance's NEURON_RT_VISIBLE_CORES)

    def config_files(self) -> dict[str, str]:
        """Every config this directory holds, by the name tritonserver selects it with ("" = config.pbtxt)."""
        variant_texts = {name: cast(str, self.files[f"configs/{name}.pbtxt"]) for name in self.variants}  # kept_text
        return {"": self.config_text, **variant_texts}

    def changes(self) -> Changes:
        """What writing would change in the directory on disk; pass it to `write` as ``confirm``."""
        return compare_model_dir(self.dest, self.files)

    def dry_run(self) -> str:
        """What would be written: the file list, every config, model.py and the per-instance cores."""
        version = self.settings.model_version
        parts = [f"# model directory {self.dest} (nothing written)"]
        parts += [
            f"#   {rel}" + (f"  <- copy of {content}" if isinstance(content, Path) else "")
            for rel, content in self.files.items()
        ]
        for name, text in self.config_files().items():
            rel = f"configs/{name}.pbtxt" if name else "config.pbtxt"
            parts += ["", f"# ---- {self.dest / rel}", text.rstrip("\n")]
        if self.model_py:
            parts += ["", f"# ---- {self.dest / str(version) / 'model.py'}", self.model_py.rstrip("\n")]
        for rel in self.shown:
            parts += ["", f"# ---- {self.dest / rel}", str(self.files[rel]).rstrip("\n")]
        if self.core_map is not None:
            parts += ["", "# ---- core map", self.core_map.describe(), *self.core_notes]
        parts += [f"warning: {w}" for w in self.warnings]
        return "\n".join(parts) + "\n"


@dataclass
class ReadBack:
    """The settings, and what read-back had to decide or keep (one line each)."""

    settings: GenerateSettings
    notes: list[str] = field(default_factory=list)


def kept_text(config: ModelConfig, on_disk: Path) -> str:
    """The config's text: the file on disk as it is (comments, layout) when it already says exactly
    this ModelConfig, so regenerating an unchanged hand-edited directory rewrites nothing."""
    if on_disk.is_file():
        try:
            text = on_disk.read_text(encoding="utf-8")
            if from_text(text) == config:
                return text
        except (ConfigError, UnicodeDecodeError):
            pass
    return to_text(config)
