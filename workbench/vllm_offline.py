"""vLLM's offline greedy generate, run as a script by the Python of an environment where vLLM is
installed (the workbench does not import it: its own environment need not have vLLM).

    python vllm_offline.py REQUEST.json RESULT.json

REQUEST: ``{"engine_args": {...model.json...}, "prompts": [...], "max_tokens": N}``. Engine
arguments that the offline engine does not take (e.g. the async engine's logging switches) are left
out and listed in the result. RESULT: ``{"outputs": [{"token_ids": [...], "text": ...}, ...],
"vllm_version": ..., "dropped_args": [...], "load_seconds": ...}``.

Each prompt is generated on its own, as the served requests arrive one by one, so both engines
run the same batch shapes. The ``__main__`` guard is required: vLLM starts its workers with spawn.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time


def generate(engine_args: dict, prompts: list[str], max_tokens: int) -> dict:
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs

    accepted = {f.name for f in dataclasses.fields(EngineArgs)}
    kept = {k: v for k, v in engine_args.items() if k in accepted}
    started = time.monotonic()
    llm = LLM(**kept)
    loaded = time.monotonic() - started
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    outputs = []
    for prompt in prompts:
        completion = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
        outputs.append({"token_ids": [int(t) for t in completion.token_ids], "text": completion.text})
    return {
        "outputs": outputs,
        "vllm_version": vllm.__version__,
        "load_seconds": round(loaded, 2),
        "dropped_args": sorted(set(engine_args) - accepted),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: vllm_offline.py REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        request = json.load(f)
    result = generate(request["engine_args"], request["prompts"], int(request["max_tokens"]))
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
