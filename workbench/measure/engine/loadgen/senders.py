"""The protocol seam of the load generator: one admin client (readiness, metadata, statistics) and
one request sender per protocol and style, each sending the bytes ``wire`` built once.

Senders keep to what a protocol client must do per request. HTTP writes the ready request to a
persistent socket and reads the status line, the headers and Content-Length bytes back, nothing
more (client CPU per request measured on a 2-core machine: about 70-130 us, against about 300 us
for ``http.client`` with the same body). Blocking gRPC writes its request's prepared HTTP/2 frames
to a connection of its own (``grpc_h2``: about a quarter of the CPU of grpcio's channel, which
``GrpcSender`` keeps as the reference it is tested and benchmarked against); the asyncio one goes
through grpc.aio with a generic call that takes and returns bytes (no protobuf per request), as
rate mode multiplexes every request in flight on one channel. Blocking senders run one per slot
thread; the asyncio ones serve large slot groups and rate mode.
``send()`` returns ``(True, payload)`` or ``(False, error text)`` and never raises: a failed request
is counted, never lost.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Protocol

from workbench.measure.engine.loadgen.grpc_h2 import GrpcH2Sender
from workbench.measure.engine.loadgen.load_plan import Interface, LoadPlan, interface_from
from workbench.measure.engine.loadgen.wire import GRPC_METHOD, HttpHead, HttpRequest, http_error, read_head
from workbench.measure.engine.measure_settings import MeasureError

__all__ = [
    "Sender",
    "Admin",
    "HttpSender",
    "GrpcH2Sender",
    "GrpcSender",
    "AsyncHttpSender",
    "AsyncGrpcSender",
    "make_sender",
]

# Every slot its own connection (no HTTP/2 multiplexing of slots on one socket, as perf_analyzer's
# threads each have their own client), messages of any size.
_GRPC_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.use_local_subchannel_pool", 1),
]


class Sender(Protocol):
    blocking: bool

    def send(self) -> Any: ...

    def close(self) -> None: ...


def make_sender(protocol: str, request: Any, url: str, timeout_s: float, *, blocking: bool) -> Sender:
    """A sender for one slot: ``request`` is ``wire.http_request``'s for HTTP, the serialized
    message for gRPC."""
    if protocol == "http":
        return HttpSender(request, timeout_s) if blocking else AsyncHttpSender(request, timeout_s)
    return GrpcH2Sender(url, request, timeout_s) if blocking else AsyncGrpcSender(url, request, timeout_s)


class HttpSender:
    """One keep-alive connection, the ready request written as-is, the response read to its end."""

    blocking = True
    aborted = False  # set by the slot group that cut it off: no retry on a new connection then

    def __init__(self, request: HttpRequest, timeout_s: float) -> None:
        self.request, self.timeout = request, timeout_s
        self.sock: socket.socket | None = None
        self.buffer = bytearray()

    def _open(self) -> socket.socket:
        sock = socket.create_connection((self.request.host, self.request.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buffer = sock, bytearray()
        return sock

    def send(self) -> tuple[bool, Any]:
        sock = self.sock
        reused = sock is not None
        try:
            try:
                return self._exchange(sock if sock is not None else self._open())
            except ConnectionError:
                if not reused or self.aborted:
                    raise
                self.close()  # the server closed an idle connection: once more on a new one
                return self._exchange(self._open())
        except TimeoutError:
            self.close()  # a late response must not be read as the next request's
            return False, "timeout: no response in time"
        except (OSError, ValueError) as err:
            self.close()
            return False, f"{type(err).__name__}: {err}"

    def _exchange(self, sock: socket.socket) -> tuple[bool, Any]:
        sock.sendall(self.request.data)
        buffer = self.buffer
        end = buffer.find(b"\r\n\r\n")
        while end < 0:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buffer += chunk
            end = buffer.find(b"\r\n\r\n")
        head = read_head(bytes(buffer[:end]))
        total = end + 4 + head.length
        while len(buffer) < total:
            chunk = sock.recv(max(65536, total - len(buffer)))
            if not chunk:
                raise ConnectionError("the server closed the connection mid-response")
            buffer += chunk
        body = bytes(buffer[end + 4 : total])
        del buffer[:total]
        return _outcome(self, head, body)

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None


def _outcome(sender: HttpSender | AsyncHttpSender, head: HttpHead, body: bytes) -> tuple[bool, Any]:
    """A read response as ``send()`` returns it; the connection closed when the server said so."""
    if head.close:
        sender.close()
    if head.status == 200:
        return True, (body, head.header_length)
    return False, http_error(head.status, body)


def _generic_call(channel: Any) -> Any:
    """ModelInfer as a bytes-in, bytes-out call (no protobuf per request)."""
    try:
        return channel.unary_unary(
            GRPC_METHOD, request_serializer=None, response_deserializer=None, _registered_method=True
        )
    except TypeError:  # grpc before 1.62
        return channel.unary_unary(GRPC_METHOD, request_serializer=None, response_deserializer=None)


class GrpcSender:
    """The serialized request through grpc's synchronous channel: the reference ``GrpcH2Sender``
    is checked against (same bytes in, same payload and error text out)."""

    blocking = True

    def __init__(self, url: str, message: bytes, timeout_s: float) -> None:
        import grpc

        self._errors = grpc.RpcError
        self.message, self.timeout = message, timeout_s
        self.channel = grpc.insecure_channel(url, options=_GRPC_OPTIONS)
        self.call = _generic_call(self.channel)

    def send(self) -> tuple[bool, Any]:
        try:
            return True, self.call(self.message, timeout=self.timeout)
        except self._errors as err:
            return False, _grpc_error(err)
        except Exception as err:  # any client-side failure is a failed request, never a lost one
            return False, f"{type(err).__name__}: {err}"

    def close(self) -> None:
        self.channel.close()


def _grpc_error(err: Any) -> str:
    try:
        return f"{err.code().name}: {err.details()}"
    except Exception:  # an RpcError that is not a call (rare): its text
        return str(err)


class AsyncHttpSender:
    """The ready request over an asyncio stream (one connection per slot)."""

    blocking = False

    def __init__(self, request: HttpRequest, timeout_s: float) -> None:
        self.request, self.timeout = request, timeout_s
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def send(self) -> tuple[bool, Any]:
        try:
            async with asyncio.timeout(self.timeout):
                return await self._exchange()
        except TimeoutError:
            self.close()
            return False, "timeout: no response in time"
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as err:
            self.close()
            return False, f"{type(err).__name__}: {err}"

    async def _exchange(self) -> tuple[bool, Any]:
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.request.host, self.request.port)
            self.streams[1].get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader, writer = self.streams
        writer.write(self.request.data)
        head = read_head((await reader.readuntil(b"\r\n\r\n"))[:-4])
        return _outcome(self, head, await reader.readexactly(head.length))

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


class AsyncGrpcSender:
    """The serialized request through a grpc.aio channel (create it inside the running loop)."""

    blocking = False

    def __init__(self, url: str, message: bytes, timeout_s: float) -> None:
        import grpc

        self._errors = grpc.aio.AioRpcError
        self.message, self.timeout = message, timeout_s
        self.channel = grpc.aio.insecure_channel(url, options=_GRPC_OPTIONS)
        self.call = _generic_call(self.channel)

    async def send(self) -> tuple[bool, Any]:
        try:
            return True, await self.call(self.message, timeout=self.timeout)
        except self._errors as err:
            return False, _grpc_error(err)
        except Exception as err:  # any client-side failure is a failed request, never a lost one
            return False, f"{type(err).__name__}: {err}"

    def close(self) -> None:
        pass  # the channel goes with its event loop

    async def aclose(self) -> None:
        await self.channel.close()


class Admin:
    """Readiness, metadata and statistics through tritonclient's synchronous clients; use it from
    the thread that made it (the HTTP client is gevent-based)."""

    def __init__(self, plan: LoadPlan) -> None:
        self.plan = plan
        if plan.protocol == "grpc":
            import tritonclient.grpc as client_module

            self.client = client_module.InferenceServerClient(plan.url)
            self.json = {"as_json": True}
        else:
            import tritonclient.http as client_module

            self.client = client_module.InferenceServerClient(
                plan.url, connection_timeout=plan.timeout_s, network_timeout=plan.timeout_s
            )
            self.json = {}

    def interface(self) -> Interface:
        plan = self.plan
        where = f"{plan.protocol}://{plan.url}"
        try:
            ready = self.client.is_model_ready(plan.model, plan.version)
            if ready:
                metadata = self.client.get_model_metadata(plan.model, plan.version, **self.json)
                config = self.client.get_model_config(plan.model, plan.version, **self.json)
        # connection refused, DNS, protocol mismatch, a server that died between two of these calls
        except Exception as err:
            raise MeasureError(f"cannot reach Triton at {where}: {err}") from None
        if not ready:
            raise MeasureError(
                f"model {plan.model!r} is not ready at {where} (not loaded, still loading, "
                "or failed to load: see the server log)"
            )
        return interface_from(metadata, config)

    def statistics(self) -> dict | None:
        try:
            return self.client.get_inference_statistics(self.plan.model, self.plan.version, **self.json)
        except Exception:  # statistics extension off or unreachable: the client numbers still stand
            return None

    def close(self) -> None:
        self.client.close()
