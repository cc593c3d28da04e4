"""The bytes of one load level's request, built once, and the few bytes read from each response.

Why bytes: a load generator written in Python spends its time building and parsing messages, and
at concurrency 1 every microsecond of that is in the latency. So each point serializes its inputs
once: for HTTP, one complete HTTP/1.1 request (Triton's binary tensor data extension, the body
made by tritonclient's ``generate_request_body``) written as-is to a persistent connection; for
gRPC, one serialized ``ModelInferRequest``, framed once into HTTP/2 (``grpc_h2``) or passed as
bytes through grpc.aio's generic call.
A response is read only as far as its status and length. The responses the engine checks (the
warm-up ones and the first of every window) are decoded fully, by tritonclient's own parsers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import numpy as np

from workbench.measure.engine.loadgen.load_plan import Interface, LoadPlan

__all__ = [
    "GRPC_METHOD",
    "HttpRequest",
    "http_request",
    "HttpHead",
    "read_head",
    "http_outputs",
    "http_error",
    "grpc_request",
    "grpc_outputs",
]

GRPC_METHOD = "/inference.GRPCInferenceService/ModelInfer"


@dataclass(frozen=True)
class HttpRequest:
    """One infer request as bytes on the wire, and what is needed to open its connection."""

    host: str
    port: int
    path: str
    data: bytes


def http_request(plan: LoadPlan, iface: Interface, arrays: list[np.ndarray]) -> HttpRequest:
    """The infer request of ``arrays`` with every output asked for as binary data."""
    import tritonclient.http as http
    from tritonclient.http.aio import InferenceServerClient

    inputs = []
    for tensor, array in zip(iface.inputs, arrays):
        item = http.InferInput(tensor.name, list(array.shape), tensor.datatype)
        item.set_data_from_numpy(array, binary_data=True)
        inputs.append(item)
    outputs = [http.InferRequestedOutput(t.name, binary_data=True) for t in iface.outputs]
    body, json_size = InferenceServerClient.generate_request_body(inputs, outputs=outputs)
    body = body if isinstance(body, bytes) else body.encode()
    host, _, port = plan.url.rpartition(":")
    path = f"/v2/models/{quote(plan.model)}" + (f"/versions/{quote(plan.version)}" if plan.version else "") + "/infer"
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: {plan.url}",
        "Content-Type: application/octet-stream",
        f"Content-Length: {len(body)}",
    ]
    if json_size is not None:
        head.append(f"Inference-Header-Content-Length: {json_size}")
    data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
    return HttpRequest(host.strip("[]"), int(port), path, data)


@dataclass(frozen=True)
class HttpHead:
    """What a response's status line and headers say about reading its body."""

    status: int
    length: int
    header_length: int | None
    close: bool


def read_head(head: bytes) -> HttpHead:
    """Parse a response head (the bytes before the blank line). ValueError for a response this
    client cannot read: no Content-Length (Triton always sends one for infer responses)."""
    if not head.startswith(b"HTTP/1."):
        raise ValueError(f"not an HTTP response: {head[:40]!r}")
    lines = head.split(b"\r\n")
    status = int(lines[0][9:12])
    length = header_length = None
    close = lines[0].startswith(b"HTTP/1.0")
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"inference-header-content-length":
            header_length = int(value)
        elif name == b"connection":
            close = value.strip().lower() == b"close"
        elif name == b"transfer-encoding" and value.strip().lower() != b"identity":
            raise ValueError(f"the server sent a {value.strip().decode()!r} body, which this client does not read")
    if length is None:
        raise ValueError("the response has no Content-Length")
    return HttpHead(status, length, header_length, close)


def http_outputs(payload: tuple[bytes, int | None]) -> dict[str, np.ndarray]:
    """Every output of a 200 response body, decoded by tritonclient."""
    from tritonclient.http import InferenceServerClient

    body, header_length = payload
    result = InferenceServerClient.parse_response_body(body, header_length=header_length)
    return {out["name"]: result.as_numpy(out["name"]) for out in result.get_response().get("outputs", [])}


def http_error(status: int, body: bytes) -> str:
    """``"HTTP 400: <Triton's error message>"``."""
    try:
        message = str(json.loads(body).get("error", body[:200]))
    except (ValueError, AttributeError):
        message = body[:200].decode(errors="replace")
    return f"HTTP {status}: {message}"


def grpc_request(plan: LoadPlan, iface: Interface, arrays: list[np.ndarray]) -> bytes:
    """The serialized ``ModelInferRequest`` of ``arrays`` (raw input contents, every output)."""
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import serialize_byte_tensor

    request = service_pb2.ModelInferRequest(model_name=plan.model, model_version=plan.version)
    for tensor, array in zip(iface.inputs, arrays):
        entry = request.inputs.add()
        entry.name, entry.datatype = tensor.name, tensor.datatype
        entry.shape.extend(array.shape)
        if tensor.datatype == "BYTES":
            packed = serialize_byte_tensor(array)
            request.raw_input_contents.append(packed.item() if packed.size else b"")
        else:
            request.raw_input_contents.append(array.tobytes())
    for tensor in iface.outputs:
        request.outputs.add().name = tensor.name
    return request.SerializeToString()


def grpc_outputs(payload: bytes) -> dict[str, np.ndarray]:
    """Every output of a serialized ``ModelInferResponse``, decoded by tritonclient."""
    from tritonclient.grpc import InferResult, service_pb2

    response = service_pb2.ModelInferResponse.FromString(payload)
    result = InferResult(response)
    return {out.name: result.as_numpy(out.name) for out in response.outputs}


def decode(protocol: str, payload: Any) -> dict[str, np.ndarray]:
    """A checked response's outputs, whichever protocol carried it."""
    return grpc_outputs(payload) if protocol == "grpc" else http_outputs(payload)
