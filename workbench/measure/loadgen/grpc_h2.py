"""gRPC's ModelInfer written straight onto one HTTP/2 connection per slot, frames prepared once.

gRPC is HTTP/2: a request is a HEADERS frame (method, path, content-type, te, grpc-timeout) and
DATA frames carrying the length-prefixed message; the response is HEADERS, DATA and trailing
HEADERS with grpc-status and grpc-message. grpcio's channel spends about half a millisecond of
CPU per request (a third of it in its own event-engine threads) on what, for one stream at a time
on a connection of its own, is a fixed sequence of bytes. So the request's header block is
encoded once with HPACK literals that are never indexed (stateless: re-sendable on any stream),
the frames are built once per connection by hyperframe, and each request only patches its stream
id in and writes the whole at once. Responses are parsed frame by frame by hyperframe and their
header blocks decoded by one stateful HPACK decoder per connection (the server indexes).

The protocol's obligations are kept: SETTINGS acknowledged and applied (frame size, initial
window), PING answered, the receive windows opened to the maximum at the start and topped up
with WINDOW_UPDATE, the server's send windows respected (a body larger than them waits for its
WINDOW_UPDATE), GOAWAY ends the connection after the streams it still serves, RST_STREAM fails
its request. Errors read the way grpcio gives them (``"<STATUS NAME>: <grpc-message>"``).
"""

from __future__ import annotations

import socket
import struct
from typing import Any
from urllib.parse import unquote

from hpack import Decoder, Encoder, NeverIndexedHeaderTuple
from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame, WindowUpdateFrame)

from workbench.measure.loadgen.wire import GRPC_METHOD

__all__ = ["GrpcH2Sender", "status_name"]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535  # RFC 9113 6.9.2: every window's size before SETTINGS or WINDOW_UPDATE say otherwise
DEFAULT_FRAME = 16384
_TOP_UP = 2**30  # receive window consumed past this: give it back in one WINDOW_UPDATE
_LAST_STREAM = 2**31 - 1


def status_name(code: int) -> str:
    """The name grpcio gives a status code (``grpc.StatusCode``), e.g. 3 -> INVALID_ARGUMENT."""
    import grpc

    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status.name
    return f"STATUS {code}"


class _Closed(ConnectionError):
    pass


class GrpcH2Sender:
    """One connection, one stream at a time, the request's frames written as built."""

    blocking = True

    def __init__(self, url: str, message: bytes, timeout_s: float) -> None:
        host, _, port = url.rpartition(":")
        self.address = (host.strip("[]"), int(port))
        self.timeout = timeout_s
        self.body = b"\x00" + struct.pack(">I", len(message)) + message  # uncompressed, length-prefixed
        timeout_ms = min(int(timeout_s * 1000), 99_999_999)  # grpc-timeout: at most 8 digits
        headers = [(":method", "POST"), (":scheme", "http"), (":path", GRPC_METHOD), (":authority", url),
                   ("content-type", "application/grpc"), ("te", "trailers"), ("grpc-timeout", f"{timeout_ms}m")]
        self.block = Encoder().encode([NeverIndexedHeaderTuple(k, v) for k, v in headers])
        self.sock: socket.socket | None = None

    # -- connection -------------------------------------------------------------------------

    def _open(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buffer, self.decoder = sock, bytearray(), Decoder()
        self.next_stream, self.going_away = 1, False
        self.peer_window, self.peer_initial, self.peer_frame = DEFAULT_WINDOW, DEFAULT_WINDOW, DEFAULT_FRAME
        self.stream_window, self.consumed = DEFAULT_WINDOW, 0
        self.frames: bytearray | None = None
        ours = SettingsFrame(0, settings={SettingsFrame.ENABLE_PUSH: 0,
                                          SettingsFrame.INITIAL_WINDOW_SIZE: MAX_WINDOW})
        opening = WindowUpdateFrame(0, window_increment=MAX_WINDOW - DEFAULT_WINDOW)
        sock.sendall(PREFACE + ours.serialize() + opening.serialize())
        # the server's SETTINGS come first on its side (RFC 9113 3.4): its frame size shapes ours
        while True:
            frame, _ = self._frame()
            self._connection_frame(frame)
            if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                break
        return sock

    def _build(self) -> None:
        """HEADERS and DATA frames of the request on stream 0; ``_stream_offsets`` patched per send."""
        frames = [HeadersFrame(1, data=self.block, flags=("END_HEADERS",))]
        body, size = self.body, self.peer_frame
        for start in range(0, len(body), size):
            last = start + size >= len(body)
            frames.append(DataFrame(1, data=body[start:start + size], flags=("END_STREAM",) if last else ()))
        if not body:
            frames[0].flags.add("END_STREAM")
        self.frames = bytearray()
        self.offsets = []
        for frame in frames:
            self.offsets.append(len(self.frames) + 5)
            self.frames += frame.serialize()

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    # -- reading ----------------------------------------------------------------------------

    def _read(self, n: int) -> bytes:
        buffer = self.buffer
        while len(buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(buffer)))
            if not chunk:
                raise _Closed("the server closed the connection")
            buffer += chunk
        out = bytes(buffer[:n])
        del buffer[:n]
        return out

    def _frame(self) -> tuple[Frame, list | None]:
        """The next frame, and for HEADERS (with its CONTINUATIONs) the decoded header list: every
        header block is decoded, whichever stream it is on, to keep the HPACK state in step."""
        frame, length = Frame.parse_frame_header(memoryview(self._read(9)))
        frame.parse_body(memoryview(self._read(length)))
        if not isinstance(frame, HeadersFrame):
            return frame, None
        block, done = frame.data, "END_HEADERS" in frame.flags
        while not done:
            more, length = Frame.parse_frame_header(memoryview(self._read(9)))
            more.parse_body(memoryview(self._read(length)))
            if not isinstance(more, ContinuationFrame):
                raise ValueError(f"HTTP/2: {type(more).__name__} inside a header block")
            block, done = block + more.data, "END_HEADERS" in more.flags
        return frame, self.decoder.decode(block)

    def _connection_frame(self, frame: Frame) -> None:
        """Frames on stream 0: settings applied and acknowledged, pings answered, send window kept."""
        if isinstance(frame, SettingsFrame):
            if "ACK" in frame.flags:
                return
            for key, value in frame.settings.items():
                if key == SettingsFrame.INITIAL_WINDOW_SIZE:
                    self.stream_window += value - self.peer_initial
                    self.peer_initial = value
                elif key == SettingsFrame.MAX_FRAME_SIZE and value != self.peer_frame:
                    self.peer_frame, self.frames = value, None
            self.sock.sendall(SettingsFrame(0, flags=("ACK",)).serialize())
        elif isinstance(frame, PingFrame):
            if "ACK" not in frame.flags:
                self.sock.sendall(PingFrame(0, opaque_data=frame.opaque_data, flags=("ACK",)).serialize())
        elif isinstance(frame, WindowUpdateFrame):
            self.peer_window += frame.window_increment
        elif isinstance(frame, GoAwayFrame):
            self.going_away = True
            self.last_served = frame.last_stream_id
            self.goaway_code = frame.error_code

    # -- one request ------------------------------------------------------------------------

    def send(self) -> tuple[bool, Any]:
        reused = self.sock is not None and not self.going_away
        try:
            if not reused:
                self.close()
                self._open()
            try:
                return self._exchange()
            except _Closed:
                if not reused:
                    raise
                self.close()  # the server closed an idle connection: once more on a new one
                self._open()
                return self._exchange()
        except (socket.timeout, TimeoutError):
            self.close()  # a late response must not be read as the next request's
            return False, "DEADLINE_EXCEEDED: Deadline Exceeded"
        except Exception as err:  # protocol, socket or server trouble: a failed request, never a lost one
            self.close()
            return False, f"{type(err).__name__}: {err}"

    def _exchange(self) -> tuple[bool, Any]:
        sid = self.next_stream
        if sid > _LAST_STREAM:
            self.close()
            self._open()
            sid = 1
        self.next_stream = sid + 2
        self.stream_window = self.peer_initial
        body, sent = self.body, 0
        if len(body) <= min(self.peer_window, self.stream_window):
            if self.frames is None:
                self._build()
            frames = self.frames
            for offset in self.offsets:
                struct.pack_into(">I", frames, offset, sid)
            self.sock.sendall(frames)
            sent = len(body)
            self.peer_window -= sent
            self.stream_window -= sent
        else:  # larger than the server lets us send yet: as its WINDOW_UPDATEs allow
            self.sock.sendall(HeadersFrame(sid, data=self.block, flags=("END_HEADERS",)).serialize())
            sent = self._push(sid, 0)
        return self._response(sid, sent)

    def _push(self, sid: int, sent: int) -> int:
        body = self.body
        while sent < len(body):
            room = min(self.peer_window, self.stream_window, self.peer_frame, len(body) - sent)
            if room <= 0:
                break
            last = sent + room >= len(body)
            frame = DataFrame(sid, data=body[sent:sent + room], flags=("END_STREAM",) if last else ())
            self.sock.sendall(frame.serialize())
            sent += room
            self.peer_window -= room
            self.stream_window -= room
        return sent

    def _response(self, sid: int, sent: int) -> tuple[bool, Any]:
        head: list | None = None
        trailers: list | None = None
        parts: list[bytes] = []
        while True:
            frame, headers = self._frame()
            if frame.stream_id == 0:
                self._connection_frame(frame)
                if self.going_away and self.last_served < sid:
                    raise _Closed(f"the server is going away (GOAWAY, error code {self.goaway_code})")
            elif frame.stream_id == sid:
                if isinstance(frame, DataFrame):
                    parts.append(frame.data)
                    self.consumed += frame.flow_controlled_length
                elif isinstance(frame, WindowUpdateFrame):
                    self.stream_window += frame.window_increment
                elif isinstance(frame, RstStreamFrame):
                    return False, f"{status_name(13)}: the server reset the stream (HTTP/2 error code {frame.error_code})"
                elif headers is not None:
                    if head is None:
                        head = headers
                    else:
                        trailers = headers
                if "END_STREAM" in frame.flags:
                    break
            if sent < len(self.body):
                sent = self._push(sid, sent)
        if self.consumed > _TOP_UP:
            self.sock.sendall(WindowUpdateFrame(0, window_increment=self.consumed).serialize())
            self.consumed = 0
        return _outcome(head, trailers if trailers is not None else head, b"".join(parts))


def _outcome(head: list | None, trailers: list | None, data: bytes) -> tuple[bool, Any]:
    """``(True, serialized ModelInferResponse)`` or ``(False, "<STATUS>: <message>")``."""
    fields = dict(trailers or ())
    if "grpc-status" not in fields:
        status = dict(head or ()).get(":status", "?")
        return False, f"{status_name(2)}: HTTP/2 response without grpc-status (HTTP status {status})"
    code = int(fields["grpc-status"])
    if code != 0:
        return False, f"{status_name(code)}: {unquote(fields.get('grpc-message', ''))}"
    if len(data) < 5 or data[0] != 0:
        return False, f"{status_name(13)}: a response message this client cannot read ({len(data)} bytes)"
    length = int.from_bytes(data[1:5], "big")
    return True, data[5:5 + length]
