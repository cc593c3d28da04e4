"""Image references, Kubernetes sub-paths and replica counts, checked against their grammar before
they reach a Dockerfile, a set-up script, a ``docker run`` line or a manifest.

The image grammar is the one Docker and every OCI registry parse (distribution/reference's
``reference.go``): ``[domain[:port]/]path[:tag][@digest]`` with lower-case path components joined
by ``.``, ``_``, ``__`` or dashes, a tag of at most 128 word characters, dots and dashes, and a
digest ``algorithm:hex`` (at least 32 hex digits); the name part at most 255 characters. Nothing
else (spaces, ``;``, ``$``, quotes) can be an image, so nothing else reaches a script.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from workbench.limits import INT32_MAX

__all__ = [
    "ImageReference",
    "image_reference",
    "subpath_problem",
    "replicas_problem",
    "kubernetes_literal",
    "host_mount_problem",
    "SYSTEM_FOLDERS",
]

# Host folders a container must not get mounted over its own (the same path inside: vLLM model
# folders) or that are the host's system itself: '/' and the FHS top-level system folders.
SYSTEM_FOLDERS = (
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
)
_SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/sbin", "/sys", "/usr")


def kubernetes_literal(text: str) -> str:
    """``text`` as a container's command or args must hold it for Kubernetes to pass it on as
    written: Kubernetes expands ``$(VAR)`` there (a model named ``$(AWS_DEFAULT_REGION)`` was loaded
    as ``us-east-1``) and reads ``$$`` as one ``$``, so every ``$`` is doubled."""
    return text.replace("$", "$$")


def host_mount_problem(path: str, flag: str) -> str | None:
    """Why ``path`` cannot be a host folder given to ``docker run -v``, or None: docker splits the
    option at ':' (a path holding one mounts something else), and '/' or a system folder would be
    mounted over the container's own (or hand the host's system to it)."""
    text = str(path)
    if ":" in text or "," in text:
        return f"{flag} {text}: docker -v cannot mount a path holding ':' or ','; move or link it elsewhere"
    folder = posixpath.normpath(text) if text else text
    if folder in SYSTEM_FOLDERS or any(folder.startswith(tree + "/") for tree in _SYSTEM_TREES):
        return (
            f"{flag} {text}: a system folder of the host; mounted into the container it would hide or expose "
            "the system's own files. Keep the models in a folder of their own"
        )
    return None


_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_COMPONENT}(?:/{_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?"
)
_NAME_MAX = 255


@dataclass(frozen=True)
class ImageReference:
    """A parsed image reference: its name (with the registry), tag and digest (either may be empty)."""

    name: str
    tag: str = ""
    digest: str = ""


def image_reference(value: Any, flag: str = "--image") -> ImageReference:
    """``value`` parsed as an image reference, or ValueError naming ``flag`` and the grammar."""
    text = value if isinstance(value, str) else None
    match = _REFERENCE.fullmatch(text) if text is not None else None
    if match is None or len(match["name"]) > _NAME_MAX:
        raise ValueError(
            f"{flag} {value!r} is not a docker image reference: write [REGISTRY[:PORT]/]NAME[:TAG][@DIGEST], "
            "NAME in lower-case letters, digits and . _ - separated by '/', e.g. "
            "nvcr.io/nvidia/tritonserver:24.10-py3"
        )
    if match["domain"] is None and match["name"] != match["name"].lower():
        raise ValueError(f"{flag} {value!r}: image names are lower-case")
    return ImageReference(match["name"], match["tag"] or "", match["digest"] or "")


def subpath_problem(subpath: str, flag: str = "--repository") -> str | None:
    """Why a PersistentVolumeClaim sub-path cannot be mounted (Kubernetes' own rule: relative, no
    ``..`` element), or None."""
    parts = subpath.split("/")
    if subpath.startswith("/") or ".." in parts:
        return (
            f"{flag}: sub-path {subpath!r} must stay inside the claim: a relative path without '..' "
            "(Kubernetes refuses the mount otherwise)"
        )
    return None


def replicas_problem(replicas: Any, flag: str = "--replicas") -> str | None:
    """A Deployment's replicas: a whole number >= 1 that fits its int32 field."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        return f"{flag} must be a whole number >= 1, got {replicas!r}"
    if replicas > INT32_MAX:
        return f"{flag} {replicas} is too large: at most {INT32_MAX} (a Deployment's replicas is an int32)"
    return None
