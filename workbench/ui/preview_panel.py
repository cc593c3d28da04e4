"""What generation will write, before it is written: config.pbtxt (editable, validated inline),
model.py, the core map, the ``docker run`` for a Neuron host beside its host recipe, and a diff
against the disk.

Writing never replaces a model directory silently: an existing one needs an explicit second
click, and then the repository module keeps the old directory as a backup. Hand edits to
config.pbtxt are never thrown away by a settings change; the user picks which one wins.
"""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets

from workbench.coremap import CoreRangeError
from workbench.deploy.devices import family_of
from workbench.deploy.docker import docker_run_command
from workbench.deploy.recipe import RecipeError
from workbench.generate.backends import backend_of, backend_of_config
from workbench.generate.config import ConfigError, from_text, validate_config
from workbench.generate.product import GeneratedModel
from workbench.generate.pytorch_backend import ServingPreview
from workbench.generate.repository import (
    Changes,
    FileContent,
    RepositoryError,
    WriteResult,
    compare_model_dir,
    write_model_dir,
)
from workbench.generate.vllm_backend import VLLM
from workbench.server.pytorch import serving_preview
from workbench.server.vllm_backend import serving_here as vllm_serving_here
from workbench.system import DEVICES_BY_INSTANCE, cores_for_instance, instance_size
from workbench.tutorial.backend_comparison import built_libtorch_backend
from workbench.ui.background import MONOSPACE_CLASS, monospace_style
from workbench.ui.layout import SCROLL_CLASS, button, hidden, row, scroll_box, shown
from workbench.ui.shared_state import WorkbenchState
from workbench.ui.widget_values import core_map_html, error_list, highlight, preformatted

_TABS = ("config.pbtxt", "model.py", "core map", "docker run", "diff")
VLLM_ENGINE_FILE = "/model.json"  # <version>/model.json: what the vLLM backend reads (the second tab shows it)


def _no_core_map(generated: GeneratedModel) -> str:
    """Why a model has no core map, in its own backend's terms."""
    label = backend_of(generated.settings).label
    if VLLM.recognises(generated.config):
        return (
            f"{label}: target {generated.settings.target} places no NeuronCores; vLLM's CPU engine runs its "
            "threads on this machine's CPUs (the engine arguments in the model.json tab). On a Neuron target "
            "the core range splits into instances of tensor-parallel-size cores."
        )
    return (
        f"{label} places nothing on cores: its threads are its config parameters "
        "(intra-op threads, INTRA_OP_THREAD_COUNT, in the settings tab)"
    )


def _origin(content: FileContent) -> str:
    """Where a listed file comes from: the file it copies; the size of bytes made here (weights)."""
    if isinstance(content, Path):
        return f"  <- copy of {content}"
    return f"  ({len(content)} bytes)" if isinstance(content, bytes) else ""


class PreviewPanel:
    """Preview tabs and the write button for ``state.generated``; ``written`` holds the last
    `WriteResult`."""

    def __init__(self, state: WorkbenchState | None = None) -> None:
        self.state = state if state is not None else WorkbenchState()
        self.written: WriteResult | None = None
        self._generated_text = ""
        self._pending: Changes | None = None  # the Changes the confirm button writes
        self.controls: dict[str, widgets.Widget] = {}
        c = self.controls
        # which config to show: config.pbtxt (editable) or a configs/<name>.pbtxt variant (read-only)
        c["config_choice"] = widgets.Dropdown(options=[("config.pbtxt", "")], value="", description="config")
        c["config_text"] = widgets.Textarea(rows=22, layout=widgets.Layout(width="50%"))
        c["config_text"].add_class(MONOSPACE_CLASS)
        c["config_view"] = widgets.HTML()
        c["config_problems"] = widgets.HTML()
        c["edit_notice"] = widgets.HTML()
        c["use_generated"] = button(
            "use generated config", icon="undo", tooltip="discard the hand edits and show what the settings generate"
        )
        c["model_py"] = widgets.HTML(layout=scroll_box("560px"))  # a long file scrolls in its own box
        c["model_py"].add_class(SCROLL_CLASS)
        c["invalid"] = widgets.HTML()  # why nothing can be written, above everything else
        c["core_map"] = widgets.HTML()
        c["docker"] = widgets.HTML()
        c["instance_type"] = widgets.Dropdown(
            options=sorted(DEVICES_BY_INSTANCE), value="inf2.xlarge", description="Neuron host"
        )
        c["diff"] = widgets.HTML(layout=scroll_box("560px"))
        c["diff"].add_class(SCROLL_CLASS)
        c["tabs"] = widgets.Tab(
            children=[
                widgets.VBox(
                    [
                        c["config_choice"],
                        c["config_problems"],
                        c["edit_notice"],
                        widgets.HBox([c["config_text"], c["config_view"]], layout=widgets.Layout(width="100%")),
                        c["use_generated"],
                    ]
                ),
                c["model_py"],
                c["core_map"],
                widgets.VBox([c["instance_type"], c["docker"]]),
                c["diff"],
            ]
        )
        for index, title in enumerate(_TABS):
            c["tabs"].set_title(index, title)
        c["config_view"].layout.width = "50%"
        c["write"] = button("write model directory", button_style="primary", icon="save")
        c["confirm_overwrite"] = button(
            "overwrite (keep backup)", button_style="danger", layout=widgets.Layout(display="none")
        )
        c["cancel_overwrite"] = button("keep existing", layout=widgets.Layout(display="none"))
        c["status"] = widgets.HTML()
        c["write"].on_click(lambda _b: self.write())
        c["confirm_overwrite"].on_click(lambda _b: self.write(overwrite=True))
        c["cancel_overwrite"].on_click(
            lambda _b: self._ask_overwrite(False, "kept the existing directory; nothing written")
        )
        c["use_generated"].on_click(lambda _b: self._use_generated())
        c["config_text"].observe(lambda _change: self._config_edited(), names="value")
        c["config_choice"].observe(lambda _change: self._config_edited(), names="value")
        c["instance_type"].observe(self._instance_changed, names="value")
        c["tabs"].observe(self._show_diff, names="selected_index")
        self.widget = widgets.VBox(
            [
                monospace_style(),
                c["invalid"],
                c["tabs"],
                row(c["write"], c["confirm_overwrite"], c["cancel_overwrite"]),
                c["status"],
            ]
        )
        # the server: who serves a PyTorch-backend model is the started server's backend
        self.state.observe(lambda _change: self.refresh(), names=["generated", "settings_problems", "server"])
        self.refresh()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    # --- views -----------------------------------------------------------------------------------

    @property
    def edited(self) -> bool:
        """True when config.pbtxt was changed by hand from what the settings generate."""
        return self.controls["config_text"].value != self._generated_text

    def refresh(self) -> None:
        """Show ``state.generated``; hand edits to config.pbtxt stay until the user drops them."""
        c = self.controls
        generated = self.state.generated
        self._ask_overwrite(False)
        if generated is None:
            # what the views showed was the last valid config, not what would be written: hide them
            c["write"].disabled = True
            c["status"].value = ""
            c["invalid"].value = (
                "<b style='color:#b00020'>The settings are not valid, so there is nothing to "
                "preview or write. Fix in the settings tab:</b>"
                + error_list(list(self.state.settings_problems) or ["see the settings tab"])
            )
            hidden(c["tabs"])
            return
        c["write"].disabled = False
        c["status"].value = c["invalid"].value = ""
        shown(c["tabs"])
        keep_edits = self.edited and bool(self._generated_text)
        self._generated_text = generated.config_text
        if keep_edits:
            c["edit_notice"].value = (
                "<div style='color:#a05a00'>config.pbtxt has hand edits; the settings changed. "
                "Your edits are kept: click <i>use generated config</i> to replace them.</div>"
            )
        else:
            c["config_text"].value = generated.config_text
        choices = [("config.pbtxt", "")] + [(f"configs/{name}.pbtxt", name) for name in generated.variants]
        keep = c["config_choice"].value if c["config_choice"].value in dict(choices).values() else ""
        c["config_choice"].options, c["config_choice"].value = choices, keep
        preview = serving_preview(generated, pytorch_backend=self._pytorch_backend())
        engine = (
            next((rel for rel in generated.files if rel.endswith(VLLM_ENGINE_FILE)), None)
            if VLLM.recognises(generated.config)
            else None
        )
        # the second tab is the model's own file: vLLM's engine arguments, the PyTorch layout's files, model.py
        c["tabs"].set_title(_TABS.index("model.py"), engine or ("model files" if preview is not None else "model.py"))
        if engine is not None:  # Triton's vLLM backend: the engine arguments are the model's file
            c["model_py"].value = preformatted(vllm_serving_here()) + highlight(generated.files[engine], "json")
        else:
            c["model_py"].value = (
                highlight(generated.model_py, "python") if preview is None else self._serving_html(generated, preview)
            )
        if generated.core_map is None:
            c["core_map"].value = preformatted(_no_core_map(generated))
        else:
            c["core_map"].value = core_map_html(generated.core_map)
        c["instance_type"].value = self._default_instance()
        c["docker"].value = self._docker_html(generated)
        self._config_edited()

    def _pytorch_backend(self):
        """The PyTorch backend the server tab serves with, so the preview names the backend that will
        serve the model: the running local server's own (False: it has none, the twin serves), else
        the one the server tab starts with (`built_libtorch_backend`, as server_panel.start does)."""
        serving = getattr(self.state.server, "pytorch", None)  # a local TritonServer; a remote one: None
        if serving is not None:
            return serving.backend.backend_dir if serving.backend is not None else False
        return built_libtorch_backend()

    def _serving_html(self, generated: GeneratedModel, preview: ServingPreview) -> str:
        """A PyTorch-backend layout: the model files, who would serve it here (the real backend the
        server's finder turns up, or the twin) with the notes, and a PyTorch 2 module's source."""
        files = [rel + _origin(content) for rel, content in generated.files.items()]
        lines = [f"{preview.layout} layout for Triton's PyTorch backend", f"served here as: {preview.served_as}"]
        lines += [f"note: {note}" for note in preview.notes] + ["", "files:"] + [f"  {f}" for f in files]
        source = highlight(generated.model_py, "python") if generated.model_py else ""
        twin = ""
        if preview.served_config_text != preview.config_text:
            twin = preformatted(
                "config.pbtxt of the Python-backend twin (what this server loads):\n" + preview.served_config_text
            )
        return preformatted("\n".join(lines)) + source + twin

    def _docker_html(self, generated) -> str:
        """The command for the Neuron host and the recipe of its image, or why there is none (its
        core range, instance type, a framework without an SDK for it)."""
        if VLLM.recognises(generated.config):
            return preformatted(
                "Triton's vLLM backend: serve it here (server tab), or in Triton's vLLM container, "
                "which has the backend; this docker run is for the Python backend's Neuron image"
            )
        if generated.core_map is None:
            return preformatted(
                "Triton's PyTorch backend: serve it here (server tab), or in the Triton container, "
                "which has the backend; the docker run here is for Neuron hosts"
            )
        cmap = generated.core_map
        note = ""
        if generated.settings.target == "cpu":
            note = preformatted(
                "target cpu: serve it here (server tab); this is the command once it is generated for a Neuron target"
            )
        try:
            run = docker_run_command(
                self.state.repository.resolve(),
                cmap.core_range,
                instance_type=self.controls["instance_type"].value,
                framework=generated.settings.framework,
                load_models=[generated.config.name],
            )
        except (ValueError, CoreRangeError, RecipeError) as err:
            return note + error_list([f"docker run: {err}"])
        recipe = preformatted(run.recipe.text()) if run.recipe is not None else ""
        return note + highlight(run.pretty, "bash") + recipe

    def _default_instance(self) -> str:
        """The smallest instance of the target's family that has the core range."""
        generated = self.state.generated
        family = generated.settings.target if generated is not None and generated.settings.target != "cpu" else "inf2"
        end = generated.core_map.end if generated is not None and generated.core_map is not None else 0
        sizes = sorted(
            (cores, instance_size(name), name)
            for name in DEVICES_BY_INSTANCE
            if family_of(name) == family and (cores := cores_for_instance(name)) is not None
        )
        return next((name for cores, _, name in sizes if cores > end), sizes[-1][2])

    def _instance_changed(self, _change) -> None:
        if self.state.generated is not None:
            self.controls["docker"].value = self._docker_html(self.state.generated)

    def _use_generated(self) -> None:
        self.controls["config_text"].value = self._generated_text
        self.controls["edit_notice"].value = ""

    def _config_edited(self) -> None:
        c = self.controls
        text = c["config_text"].value
        problems = self.config_problems()
        c["config_problems"].value = error_list(problems)
        variant = c["config_choice"].value
        c["config_text"].layout.display = "none" if variant else None
        if variant and self.state.generated is not None:  # a variant is shown as generated
            text = self.state.generated.config_files().get(variant, "")
        c["config_view"].value = highlight(text, "pbtxt")
        if not self.edited:
            c["edit_notice"].value = ""
        if self.state.generated is not None:
            c["write"].disabled = bool(problems)
            self._show_diff()

    def config_problems(self) -> list[str]:
        """Parse and validation errors of the config text as shown (hand edits included)."""
        text = self.controls["config_text"].value
        try:
            config = from_text(text)
        except ConfigError as err:
            return [str(err)]
        problems = validate_config(config)
        problems += [p for p in backend_of_config(config).config_problems(config) if p not in problems]
        expected = self.state.generated.config.name if self.state.generated is not None else None
        if expected and config.name != expected:
            problems.append(f"name {config.name!r} must be the model directory's name {expected!r}")
        return problems

    def files(self) -> dict:
        """What a write puts in the model directory: the generated files with config.pbtxt as shown."""
        files = dict(self.state.generated.files)
        files["config.pbtxt"] = self.controls["config_text"].value
        return files

    def _show_diff(self, _change=None) -> None:
        """Diff only while its tab is open: it reads every file of the model directory (the
        compiled model too), which is too slow to repeat on each edit for a large model."""
        c = self.controls
        if c["tabs"].selected_index == _TABS.index("diff") and self.state.generated is not None:
            c["diff"].value = self._diff_html()

    def _diff_html(self) -> str:
        generated = self.state.generated
        text = compare_model_dir(generated.dest, self.files()).diff
        if not generated.dest.exists():
            return preformatted(f"{generated.dest} does not exist yet: everything is new")
        if not text:
            return preformatted(f"{generated.dest} on disk is the same as this preview")
        return highlight(text, "diff")

    # --- writing ---------------------------------------------------------------------------------

    def _ask_overwrite(self, ask: bool, message: str | None = None) -> None:
        c = self.controls
        c["confirm_overwrite"].layout.display = c["cancel_overwrite"].layout.display = None if ask else "none"
        c["write"].disabled = ask or self.state.generated is None
        if not ask:
            self._pending = None
        if message is not None:
            c["status"].value = preformatted(message)

    def write(self, overwrite: bool = False):
        """Write the model directory. An existing one that would change is only replaced with
        ``overwrite`` (the confirm button, which writes exactly the changes shown, or refuses if the
        disk changed since); otherwise the user is shown the changes and asked. Returns the WriteResult, or None."""
        c = self.controls
        generated = self.state.generated
        if generated is None:
            c["status"].value = error_list(["nothing to write: the settings are not valid"])
            return None
        problems = self.config_problems()
        if problems:
            c["status"].value = error_list(["not written: config.pbtxt has problems"] + problems)
            return None
        dest = generated.dest
        confirm = self._pending if overwrite else None  # the changes the user was shown
        if dest.exists() and not overwrite:
            changes = compare_model_dir(dest, self.files())
            if changes.empty:
                self._ask_overwrite(False, f"{dest} already holds exactly these files; nothing written")
                return None
            self._pending = changes
            self._ask_overwrite(
                True,
                f"{dest} already exists. Writing would change it:\n{changes.summary()}\n"
                "Overwrite it? The current directory is kept as a timestamped backup (its "
                "path is shown after writing); the diff tab shows every line.",
            )
            return None
        try:
            result = write_model_dir(dest, self.files(), overwrite=overwrite and confirm is None, confirm=confirm)
        except (RepositoryError, OSError) as err:
            self._ask_overwrite(False)
            c["status"].value = error_list([f"not written: {err}"])
            return None
        self._ask_overwrite(False)
        self.written = result
        backup = f"; the previous directory is now {result.backup}" if result.backup else ""
        wrote = html.escape(f"{result.path}{backup}")
        c["status"].value = f"<div style='color:#1b5e20'>wrote {wrote}</div>"
        self._show_diff()
        self.state.written = result
        return result
