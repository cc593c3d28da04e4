"""Ask the loaded generative model a question: a prompt, a token budget, Send, and the answer as it
streams in (HTTP ``generate_stream`` of Triton's generate extension, `check_generate.ask_served`).

The answer is greedy (temperature 0), so it is the answer vLLM's offline generate gives for the same
prompt and model directory: what `check_generate.check_served_generation` checks token by token.
A refusal to send is one sentence under the controls (no server, nothing typed, no model). An ask
that fails or is cancelled ends in the answer area: its note says so in one sentence (what the
server answered, or "cancelled") above the text that arrived before, never a traceback, and the
area is ready for the next ask.
"""

from __future__ import annotations

import html
import threading

import ipywidgets as widgets

from workbench.served_generation import ServedAnswer, ask_served
from workbench.server.errors import ServerError
from workbench.tasks import check_cancel
from workbench.ui.background import TaskControls
from workbench.ui.layout import description_style, heading, row
from workbench.ui.shared_state import WorkbenchState
from workbench.ui.widget_values import error_list

__all__ = ["AskArea"]

MAX_TOKENS_LIMIT = 4096  # the field's bound; the model's max_model_len is the server's to enforce


class AskArea:
    """Prompt, max tokens and Send for the model named ``state.name`` on ``state.server``;
    ``answer`` is the last `ServedAnswer` (None before one, or after a failure)."""

    def __init__(self, state: WorkbenchState) -> None:
        self.state = state
        self.answer: ServedAnswer | None = None
        self._lock = threading.Lock()
        self._pieces: list[str] = []
        self._ended: str | None = None  # why the last ask ended without an answer (kept: a late piece changes nothing)
        self._asked = 0  # max tokens of the ask in flight or last answered
        self.busy = ""  # why the model takes no prompt now (the server tab is unloading it), or ""
        self.controls: dict[str, widgets.Widget] = {}
        c = self.controls
        style = description_style("100px")
        c["prompt"] = widgets.Textarea(
            description="prompt",
            placeholder="what the model should continue",
            rows=3,
            style=style,
            layout=widgets.Layout(width="640px", max_width="100%"),
        )
        c["max_tokens"] = widgets.BoundedIntText(
            value=16,
            min=1,
            max=MAX_TOKENS_LIMIT,
            description="max tokens",
            style=style,
            layout=widgets.Layout(width="220px"),
        )
        self.ops = TaskControls("Send", run_tooltip="send the prompt to the loaded model (greedy, streamed)")
        c["send"], c["cancel"], c["status"] = self.ops.run_button, self.ops.cancel_button, self.ops.status
        c["answer"] = widgets.HTML()
        c["answer"].add_class("workbench-answer")
        c["error"] = widgets.HTML()
        c["send"].on_click(lambda _b: self.send())
        # a new server (a restart, another connection): what the last one said no longer holds
        self.state.observe(lambda _change: self._forget_failure(), names="server")
        self.widget = widgets.VBox(
            [
                heading("Ask the model (generative models: Triton's vLLM backend)"),
                c["prompt"],
                row(c["max_tokens"], self.ops.widget),
                c["error"],
                c["answer"],
            ]
        )

    def problems(self) -> list[str]:
        """Why a prompt cannot be sent now, in this area's words (empty: it can)."""
        server = self.state.server
        problems = []
        if server is None or not server.running:
            problems.append("start the server first (or connect to one), then load the model")
        if not self.controls["prompt"].value.strip():
            problems.append("prompt is empty: write the text the model should continue")
        if not self.state.name:
            problems.append("no model: name it in the settings tab")
        if self.busy:
            problems.append(self.busy)
        return problems

    def send(self) -> None:
        """Send the prompt in a worker; the answer appears as it streams in."""
        c = self.controls
        problems = self.problems()
        if not problems and self.ops.running:
            problems = ["the last prompt is still being answered: wait, or Cancel it"]
        if not problems:
            problems = self._not_generative(self.state.server, self.state.name)
        if problems:
            c["error"].value = error_list(problems)
            if not self.ops.running:  # the refusal stands alone, not above an answer to another prompt
                c["answer"].value = ""
            return
        server, model = self.state.server, self.state.name
        prompt, max_tokens = c["prompt"].value, c["max_tokens"].value
        self._asked = max_tokens
        try:
            url = server.http_url
        except ValueError as err:  # a server connected over gRPC only
            c["error"].value = error_list([f"ask needs the server's HTTP endpoint: {err}"])
            return
        c["error"].value = ""
        self.answer = None
        with self._lock:
            self._pieces, self._ended = [], None
        self._show_answer(model)

        def work(*, progress, cancel):
            progress(0, 1, f"asking {model}")

            def arrived(piece: str) -> None:
                check_cancel(cancel)  # Cancel ends the stream at its next piece
                self._arrived(model, piece)

            try:
                answer = ask_served(url, model, prompt, max_tokens, on_text=arrived)
            except RuntimeError as err:
                raise RuntimeError(f"{model} did not answer: {err}") from None
            except OSError as err:
                raise RuntimeError(f"no server answers at {url}: {getattr(err, 'reason', err)}") from None
            except (ValueError, KeyError) as err:
                raise RuntimeError(
                    f"{model} answered something that is not a generate response ({err}): is it a "
                    "generative model (Triton's vLLM backend)?"
                ) from None
            progress(1, 1, f"{len(answer.token_ids)} tokens")
            return answer

        def done(task) -> None:
            if task.state == "done":
                self.answer = task.result
                self._show_answer(model, final=True)
            elif task.state == "failed":
                self._show_answer(model, ended=f"no answer: {task.error}")
                c["error"].value = error_list([str(task.error)])  # the status line says "why: below"
            else:  # cancelled: the stream ended at its next piece (or before the first)
                self._show_answer(model, ended="cancelled")

        self.ops.start(work, on_done=done)

    @staticmethod
    def _not_generative(server, model: str) -> list[str]:
        """Why ``model`` on ``server`` takes no prompt, read from its served config (the vLLM backend
        declares its tensors there): it must stream (decoupled) text_input -> text_output. Empty
        when it does, or when the server cannot say (the ask then says what the server answers)."""
        try:
            config = server.model_config(model)
        except ServerError:  # no answer from the server: the ask itself says so, in its note
            return []
        except Exception as err:  # noqa: BLE001 - Triton's refusal (tritonclient's exception): no such model
            return [f"{model} is not loaded on this server: load it first ({str(err).splitlines()[0][:160]})"]
        if not isinstance(config, dict):
            return []
        inputs = [entry.get("name") for entry in config.get("input", [])]
        outputs = [entry.get("name") for entry in config.get("output", [])]
        streams = bool((config.get("model_transaction_policy") or {}).get("decoupled"))
        if "text_input" in inputs and "text_output" in outputs and streams:
            return []
        return [
            f"{model} is not a streaming LLM (it takes {', '.join(map(str, inputs)) or 'no inputs'}): the ask area "
            "sends prompts to models that stream text_output for a text_input, such as Triton's vLLM backend's"
        ]

    def _forget_failure(self) -> None:
        """A new server: an error or a failed ask's note about the last one is cleared (an answer stays)."""
        if self.ops.running:
            return
        self.controls["error"].value = ""
        if self.answer is None:
            self.controls["answer"].value = ""

    def _cap_note(self, asked: int, got: int) -> str:
        """Why fewer tokens came back than asked: the model's end-of-sequence, or its max_model_len
        (prompt and answer together; read from the model directory's 1/model.json when it is here)."""
        if not got or got >= asked:  # no token ids (a model without logprobs): nothing to say
            return ""
        limit = ""
        try:
            import json

            engine = json.loads((self.state.model_dir / "1" / "model.json").read_text())
            if engine.get("max_model_len"):
                limit = f", or its max_model_len of {engine['max_model_len']} tokens (prompt and answer together)"
        except (OSError, ValueError, AttributeError):
            pass
        return f"; {got} of the {asked} asked: the model stopped at its end-of-sequence token{limit}"

    def _arrived(self, model: str, piece: str) -> None:
        with self._lock:
            if self._ended is not None:  # the ask ended (failed or cancelled): its state stays as shown
                return
            self._pieces.append(piece)
        self._show_answer(model)

    def _show_answer(self, model: str, final: bool = False, ended: str | None = None) -> None:
        """The answer so far under a note: answering, the tokens of a finished answer, or ``ended``
        (why an ask stopped without one; the text that arrived before stays shown)."""
        with self._lock:
            if ended is not None:
                self._ended = ended
            ended = self._ended
            text = "".join(self._pieces)
        if final and self.answer is not None:
            text = self.answer.text
            ids = ", ".join(map(str, self.answer.token_ids))
            note = (
                f"{model}: {len(self.answer.token_ids)} tokens (greedy)"
                f"{self._cap_note(self._asked, len(self.answer.token_ids))}: {ids}"
            )
        elif ended is not None:
            note = f"{model}: {ended}"
        else:
            note = f"{model}: answering..." if text or self.ops.running else ""
        empty = "(no text)" if ended is not None else "(no text yet)"
        body = html.escape(text) if text else f"<i style='color:#777'>{empty}</i>"
        self.controls["answer"].value = (
            (
                f"<div class='workbench-answer-note' style='color:#555;font-size:12px'>{html.escape(note)}</div>"
                f"<pre class='workbench-answer-text' style='white-space:pre-wrap;margin:0'>{body}</pre>"
            )
            if note
            else ""
        )
