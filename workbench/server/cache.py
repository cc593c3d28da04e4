"""The response cache a tritonserver starts with.

A model whose config has ``response_cache { enable: true }`` loads on a server without a cache and
silently caches nothing; ``--cache-config`` alone makes the pip wheel's server fail to start (it
looks for libtritoncache_local.so in /opt/tritonserver/caches), so the install's cache directory
goes with it (both measured on Triton 2.51). Both are server-start flags: the repository is read
when the server starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["RESPONSE_CACHE_BYTES", "cache_args"]

RESPONSE_CACHE_BYTES = 64 * 1024 * 1024


def cache_args(
    repository: Path,
    config_name: str | None,
    wanted: bool | None,
    cache_dir: Path | None,
    extra_args: Iterable[str] = (),
) -> list[str]:
    """The flags for a local response cache: when ``wanted``, or (``wanted`` None) when a model's
    config -- ``configs/<config_name>.pbtxt`` where it has one -- asks for it; flags already in
    ``extra_args`` are left to them."""
    # start-up: generate/ loads only when a server starts with a response cache
    from workbench.generate.repository import response_cache_models

    given = {a.split("=", 1)[0] for a in extra_args}
    if wanted is None:
        wanted = bool(response_cache_models(repository, config_name))
    if not wanted:
        return []
    args = [] if "--cache-config" in given else [f"--cache-config=local,size={RESPONSE_CACHE_BYTES}"]
    if cache_dir is not None and "--cache-directory" not in given:
        args.append(f"--cache-directory={cache_dir}")
    return args
