"""The protocol seam of the load generator: one admin client (readiness, metadata, statistics) and
one request sender per protocol and style, each sending one request built once per load level.

Why blocking senders: at low concurrency (up to ``BLOCKING_MAX_CONCURRENCY``) each slot is a
thread making blocking calls (grpc's synchronous stub, ``http.client``): measured on a 2-core
machine at concurrency 1, that costs about 40-60 us less client CPU per request than grpc.aio or
aiohttp, and at concurrency 1 every microsecond of it lands in the latency. Higher concurrency and
rate mode send from one asyncio event loop, where threads would fight over the GIL.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any, Protocol
from urllib.parse import quote

import numpy as np

from workbench.measure.loadgen.plan import MAX_OUTSTANDING, Interface, LoadPlan, interface_from
from workbench.measure.settings import MeasureError

__all__ = ["Sender", "Admin", "make_sender", "BLOCKING_MAX_CONCURRENCY",
           "GrpcSender", "GrpcBlockingSender", "HttpSender", "HttpBlockingSender"]

# Concurrency mode up to this many slots: one thread per slot with a blocking client (cheaper per
# request); above it, one asyncio event loop (threads past a few would contend for the GIL).
BLOCKING_MAX_CONCURRENCY = 4


class Sender(Protocol):
    """Sends the one pre-built request of a load level. ``send()`` returns ``(True, payload)`` or
    ``(False, error text)`` and never raises (a failed request is counted, never lost); it is a
    coroutine unless ``blocking``, then a plain call made from one thread per slot.
    ``outputs(payload)`` decodes a response for the output check."""

    blocking: bool

    def send(self) -> Any: ...

    def outputs(self, payload: Any) -> dict[str, np.ndarray]: ...

    async def close(self) -> None: ...


def make_sender(plan: LoadPlan, iface: Interface, arrays: list[np.ndarray]) -> Sender:
    """The sender for this plan's protocol: blocking threads at low concurrency, asyncio otherwise."""
    blocking = plan.concurrency is not None and plan.concurrency <= BLOCKING_MAX_CONCURRENCY
    kind = {("grpc", False): GrpcSender, ("grpc", True): GrpcBlockingSender,
            ("http", False): HttpSender, ("http", True): HttpBlockingSender}[plan.protocol, blocking]
    return kind(plan, iface, arrays)



class Admin:
    """Metadata, readiness and statistics through tritonclient's asyncio clients."""

    def __init__(self, plan: LoadPlan) -> None:
        self.plan = plan
        if plan.protocol == "grpc":
            import tritonclient.grpc.aio as client_module
            self.client = client_module.InferenceServerClient(plan.url)
            self.json = {"as_json": True}
        else:
            import tritonclient.http.aio as client_module
            self.client = client_module.InferenceServerClient(plan.url, conn_timeout=plan.timeout_s)
            self.json = {}

    async def interface(self) -> Interface:
        plan = self.plan
        where = f"{plan.protocol}://{plan.url}"
        try:
            ready = await self.client.is_model_ready(plan.model, plan.version)
        except Exception as err:  # connection refused, DNS, protocol mismatch: all mean "cannot reach"
            raise MeasureError(f"cannot reach Triton at {where}: {err}") from None
        if not ready:
            raise MeasureError(f"model {plan.model!r} is not ready at {where} (not loaded, still loading, "
                               "or failed to load: see the server log)")
        metadata = await self.client.get_model_metadata(plan.model, plan.version, **self.json)
        config = await self.client.get_model_config(plan.model, plan.version, **self.json)
        return interface_from(metadata, config)

    async def statistics(self) -> dict | None:
        try:
            return await self.client.get_inference_statistics(self.plan.model, self.plan.version, **self.json)
        except Exception:  # statistics extension off or unreachable: the client numbers still stand
            return None

    async def close(self) -> None:
        await self.client.close()


_GRPC_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def _grpc_request(plan: LoadPlan, iface: Interface, arrays: list[np.ndarray]) -> Any:
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
    return request


def _grpc_outputs(response: Any) -> dict[str, np.ndarray]:
    from tritonclient.grpc import InferResult

    result = InferResult(response)
    return {out.name: result.as_numpy(out.name) for out in response.outputs}


class GrpcSender:
    """Sends one pre-built ``ModelInferRequest`` over a grpc.aio channel."""

    blocking = False
    outputs = staticmethod(_grpc_outputs)

    def __init__(self, plan: LoadPlan, iface: Interface, arrays: list[np.ndarray]) -> None:
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        self._grpc = grpc
        self.request = _grpc_request(plan, iface, arrays)
        self.timeout = plan.timeout_s
        self.channel = grpc.aio.insecure_channel(plan.url, options=_GRPC_OPTIONS)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    async def send(self) -> tuple[bool, Any]:
        try:
            return True, await self.stub.ModelInfer(self.request, timeout=self.timeout)
        except self._grpc.aio.AioRpcError as err:
            return False, f"{err.code().name}: {err.details()}"
        except Exception as err:  # any client-side failure is a failed request, never a lost one
            return False, f"{type(err).__name__}: {err}"

    async def close(self) -> None:
        await self.channel.close()


class GrpcBlockingSender:
    """The same request through grpc's synchronous stub, called from one thread per slot (the
    channel is thread-safe and shared)."""

    blocking = True
    outputs = staticmethod(_grpc_outputs)

    def __init__(self, plan: LoadPlan, iface: Interface, arrays: list[np.ndarray]) -> None:
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        self._grpc = grpc
        self.request = _grpc_request(plan, iface, arrays)
        self.timeout = plan.timeout_s
        self.channel = grpc.insecure_channel(plan.url, options=_GRPC_OPTIONS)
        self.call = service_pb2_grpc.GRPCInferenceServiceStub(self.channel).ModelInfer

    def send(self) -> tuple[bool, Any]:
        try:
            return True, self.call(self.request, timeout=self.timeout)
        except self._grpc.RpcError as err:
            return False, f"{err.code().name}: {err.details()}"
        except Exception as err:  # any client-side failure is a failed request, never a lost one
            return False, f"{type(err).__name__}: {err}"

    async def close(self) -> None:
        self.channel.close()


class _HttpRequest:
    """The binary infer body (tritonclient's ``generate_request_body``), its headers and path, and
    the response parser, shared by both HTTP senders."""

    def __init__(self, plan: LoadPlan, iface: Interface, arrays: list[np.ndarray]) -> None:
        import tritonclient.http as http
        import tritonclient.http.aio as http_aio

        self._parse = http_aio.InferenceServerClient.parse_response_body
        inputs = []
        for tensor, array in zip(iface.inputs, arrays):
            item = http.InferInput(tensor.name, list(array.shape), tensor.datatype)
            item.set_data_from_numpy(array, binary_data=True)
            inputs.append(item)
        outputs = [http.InferRequestedOutput(t.name, binary_data=True) for t in iface.outputs]
        body, json_size = http_aio.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
        self.body = body if isinstance(body, bytes) else body.encode()
        # identity: the client would otherwise ask for gzip and the server would spend time compressing
        self.headers = {"Accept-Encoding": "identity"}
        if json_size is not None:
            self.headers["Inference-Header-Content-Length"] = str(json_size)
        path = f"/v2/models/{quote(plan.model)}"
        if plan.version:
            path += f"/versions/{plan.version}"
        self.path = f"{path}/infer"

    def outputs(self, payload: tuple[bytes, str | None]) -> dict[str, np.ndarray]:
        body, header_length = payload
        result = self._parse(body, header_length=int(header_length) if header_length else None)
        return {out["name"]: result.as_numpy(out["name"]) for out in result.get_response().get("outputs", [])}


class HttpSender(_HttpRequest):
    """Posts the pre-built body with aiohttp (tritonclient's asyncio HTTP transport)."""

    blocking = False

    def __init__(self, plan: LoadPlan, iface: Interface, arrays: list[np.ndarray]) -> None:
        import aiohttp

        super().__init__(plan, iface, arrays)
        self.uri = f"http://{plan.url}{self.path}"
        # One connection per request in flight: N in concurrency mode, at most MAX_OUTSTANDING in
        # rate mode (a smaller pool would queue requests inside the client and hide it in latency).
        limit = plan.concurrency or MAX_OUTSTANDING
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit),
                                             timeout=aiohttp.ClientTimeout(total=plan.timeout_s),
                                             auto_decompress=False)

    async def send(self) -> tuple[bool, Any]:
        try:
            async with self.session.post(self.uri, data=self.body, headers=self.headers) as response:
                body = await response.read()
                if response.status == 200:
                    return True, (body, response.headers.get("Inference-Header-Content-Length"))
                return False, f"HTTP {response.status}: {_http_error(body)}"
        except asyncio.TimeoutError:
            return False, "timeout: no response in time"
        except Exception as err:  # any client-side failure is a failed request, never a lost one
            return False, f"{type(err).__name__}: {err}"

    async def close(self) -> None:
        await self.session.close()


class HttpBlockingSender(_HttpRequest):
    """Posts the pre-built body with ``http.client``, one keep-alive connection per sending thread."""

    blocking = True

    def __init__(self, plan: LoadPlan, iface: Interface, arrays: list[np.ndarray]) -> None:
        super().__init__(plan, iface, arrays)
        host, _, port = plan.url.rpartition(":")
        self._address = (host.strip("[]"), int(port))
        self.timeout = plan.timeout_s
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()

    def _connection(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            import http.client

            connection = http.client.HTTPConnection(*self._address, timeout=self.timeout)
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    def send(self) -> tuple[bool, Any]:
        connection = self._connection()
        try:
            connection.request("POST", self.path, body=self.body, headers=self.headers)
            response = connection.getresponse()
            body = response.read()
        except (socket.timeout, TimeoutError):
            connection.close()  # a late response must not be read as the next request's
            return False, "timeout: no response in time"
        except Exception as err:  # any client-side failure is a failed request, never a lost one
            connection.close()  # reopened by the next request
            return False, f"{type(err).__name__}: {err}"
        if response.status == 200:
            return True, (body, response.getheader("Inference-Header-Content-Length"))
        return False, f"HTTP {response.status}: {_http_error(body)}"

    async def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()


def _http_error(body: bytes) -> str:
    import json

    try:
        return str(json.loads(body).get("error", body[:200]))
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace")
