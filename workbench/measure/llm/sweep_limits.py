"""How far an LLM sweep's numbers may go on this machine, checked before anything loads: every value
that sizes the client's memory (prompts x prompt tokens), its threads (requests in flight), the
server's processes (instances) or the sender's schedule (request rates) has an upper bound here,
and a request's input + output tokens must fit the model's max_model_len (model.json, else the
model folder's config.json ``max_position_embeddings``, as vLLM derives it).

Unbounded, ``--input-tokens 1000000000`` asked numpy for 7.45 GiB, ``--concurrency 100000`` could
not start its threads and ``--instances 100000`` went to the server as a load request (issue 47).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from workbench.files import NotRegularFile, read_text
from workbench.limits import memory_available, thread_count_limit

__all__ = [
    "MAX_TOKENS",
    "MAX_PROMPTS",
    "MAX_INSTANCES",
    "MIN_RATE",
    "MAX_RATE",
    "PROMPT_BYTES_PER_TOKEN",
    "load_problems",
    "length_problems",
    "model_max_len",
]

# Longer than any model's context (the longest served ones take 10M tokens): a sanity bound the
# model's own max_model_len narrows.
MAX_TOKENS = 2**24
# Distinct prompts sent in turn: far more than any run sends requests.
MAX_PROMPTS = 100_000
# Model instances of one variant: each is a vLLM engine process; the largest Neuron instance
# (trn2.48xlarge) has 128 physical NeuronCores, one instance each at most.
MAX_INSTANCES = 128
# Requests per second: below one per 1000 s no window ever sees a request (and the schedule's
# gaps overflow); above 10,000/s one sender thread cannot keep the schedule.
MIN_RATE, MAX_RATE = 1e-3, 1e4
# What a prompt costs while it is built and kept (measured order: token id lists as Python ints,
# the tokenizer's round trip, the text): memory is budgeted at this many bytes per prompt token.
PROMPT_BYTES_PER_TOKEN = 256
MEMORY_SHARE = 4  # the prompts may take a quarter of the memory available; the server needs the rest


def _worst(length) -> int:
    """The longest a streaming ``Lengths`` draws (normal: mean + 4 sigma, clipped draws aside)."""
    spread = getattr(length, "spread", 0) or 0
    distribution = getattr(length, "distribution", "fixed")
    return int(length.mean) + (0 if distribution == "fixed" else spread if distribution == "uniform" else 4 * spread)


def load_problems(
    *,
    input_tokens,
    output_tokens,
    prompts: int,
    instances: Sequence[int],
    concurrency: Sequence[int] | None,
    request_rate: Sequence[float] | None,
    what: dict[str, str] | None = None,
) -> list[str]:
    """The plan's numbers past what this machine can run, one line each. ``what`` maps a field
    (``input_tokens``, ``prompts`` ...) to the words of the screen it came from (default: its name)."""
    name = lambda field: (what or {}).get(field, field.replace("_", " "))  # noqa: E731
    problems = []
    longest_in, longest_out = _worst(input_tokens), _worst(output_tokens)
    for field, longest in (("input_tokens", longest_in), ("output_tokens", longest_out)):
        if longest > MAX_TOKENS:
            problems.append(
                f"{name(field)} {longest}: at most {MAX_TOKENS} tokens per request (longer than any model's context)"
            )
    if prompts > MAX_PROMPTS:
        problems.append(f"{name('prompts')} {prompts}: at most {MAX_PROMPTS} distinct prompts")
    elif longest_in <= MAX_TOKENS:
        budget = memory_available() // MEMORY_SHARE
        need = prompts * longest_in * PROMPT_BYTES_PER_TOKEN
        if need > budget:
            problems.append(
                f"{name('prompts')} {prompts} x {name('input_tokens')} {longest_in}: building them needs "
                f"about {need / 2**30:.1f} GiB, more than a quarter of the {memory_available() / 2**30:.1f} "
                "GiB available; give fewer or shorter prompts"
            )
    big = [n for n in instances if n > MAX_INSTANCES]
    if big:
        problems.append(
            f"{name('instances')} {big[0]}: at most {MAX_INSTANCES} instances (each is a vLLM engine "
            "process holding its own cores)"
        )
    threads = thread_count_limit()
    many = [n for n in concurrency or () if n > threads.value]
    if many:
        problems.append(
            f"{name('concurrency')} {many[0]}: at most {threads.value} requests in flight on this machine "
            f"(one client thread each; {threads.source})"
        )
    for rate in request_rate or ():
        if not MIN_RATE <= rate <= MAX_RATE:
            problems.append(
                f"{name('request_rate')} {rate:g}: give {MIN_RATE:g} to {MAX_RATE:g} requests per second "
                "(slower never fills a window; faster than one sender keeps)"
            )
            break
    return problems


def model_max_len(max_model_len: int | None, model_folder: str | Path | None) -> tuple[int, str] | None:
    """(the longest sequence the model serves, where that is said): model.json's max_model_len,
    else the model folder's config.json ``max_position_embeddings`` (vLLM's default); None when
    neither says. A config.json that is not a JSON object says nothing."""
    if isinstance(max_model_len, int) and not isinstance(max_model_len, bool) and max_model_len > 0:
        return max_model_len, "max_model_len in model.json"
    if not model_folder:
        return None
    path = Path(model_folder) / "config.json"
    try:
        config = json.loads(read_text(path, limit=16 * 2**20))
    except (OSError, NotRegularFile, ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    nested = config.get("text_config")
    text: dict = nested if isinstance(nested, dict) else {}
    positions = config.get("max_position_embeddings", text.get("max_position_embeddings"))
    if isinstance(positions, int) and not isinstance(positions, bool) and positions > 0:
        return positions, f"max_position_embeddings in {path}"
    return None


def length_problems(
    input_tokens, output_tokens, limit: tuple[int, str] | None, what: dict[str, str] | None = None
) -> list[str]:
    """Input + output tokens past the model's max_model_len: vLLM refuses such a request, or stops
    it short and the point would count tokens never asked for."""
    if limit is None:
        return []
    name = lambda field: (what or {}).get(field, field.replace("_", " "))  # noqa: E731
    total = _worst(input_tokens) + _worst(output_tokens)
    if total <= limit[0]:
        return []
    return [
        f"{name('input_tokens')} {_worst(input_tokens)} + {name('output_tokens')} {_worst(output_tokens)} = "
        f"{total} tokens per request, past the model's {limit[0]} ({limit[1]})"
    ]
