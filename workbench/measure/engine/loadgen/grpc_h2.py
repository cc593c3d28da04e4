"""gRPC's ModelInfer written straight onto one HTTP/2 connection per slot, frames prepared once.

gRPC is HTTP/2: a request is a HEADERS frame (method, path, content-type, te, grpc-timeout) and
DATA frames carrying the length-prefixed message; the response is HEADERS, DATA and trailing
HEADERS with grpc-status and grpc-message. grpcio's channel spends 400-500 us of CPU per request
on a 2-core machine (a third of it in its own event-engine threads) on what, for one stream at a
time on a connection of its own, is a fixed sequence of bytes; this sender spends about 120, as
much as the HTTP/1.1 one. The request's header block is encoded once with HPACK literals that
are never indexed (stateless: re-sendable on any stream), its frames are built once per
connection by hyperframe, and each request only patches its stream id in and writes the whole at
once. Of a response, the frames every response has (DATA, HEADERS, WINDOW_UPDATE) are read off
their 9-byte header here; the others are parsed by hyperframe. Header blocks go through one
stateful HPACK decoder per connection (the server indexes).

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
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from workbench.measure.engine.loadgen.wire import GRPC_METHOD

__all__ = ["GrpcH2Sender", "status_name"]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535  # RFC 9113 6.9.2: every window's size before SETTINGS or WINDOW_UPDATE say otherwise
DEFAULT_FRAME = 16384
_TOP_UP = 2**30  # receive window consumed past this: give it back in one WINDOW_UPDATE
_LAST_STREAM = 2**31 - 1
_FRAME_HEADER = struct.Struct(">HBBBL")  # RFC 9113 4.1: 24-bit length, type, flags, stream id
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x4, 0x8, 0x20


def status_name(code: int) -> str:
    """The name grpcio gives a status code (``grpc.StatusCode``), e.g. 3 -> INVALID_ARGUMENT."""
    import grpc

    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status.name
    return f"STATUS {code}"


class ConnectionClosed(ConnectionError):
    """The server closed the connection (or is going away) before the stream ended."""


class GrpcH2Sender:
    """One connection, one stream at a time, the request's frames written as built."""

    blocking = True
    aborted = False  # set by the slot group that cut it off: no retry on a new connection then

    def __init__(self, url: str, message: bytes, timeout_s: float) -> None:
        host, _, port = url.rpartition(":")
        self.address = (host.strip("[]"), int(port))
        self.timeout = timeout_s
        self.body = b"\x00" + struct.pack(">I", len(message)) + message  # uncompressed, length-prefixed
        timeout_ms = min(int(timeout_s * 1000), 99_999_999)  # grpc-timeout: at most 8 digits
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", GRPC_METHOD),
            (":authority", url),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", f"{timeout_ms}m"),
        ]
        self.block = Encoder().encode([NeverIndexedHeaderTuple(k, v) for k, v in headers])
        self.sock: socket.socket | None = None

    # -- connection -------------------------------------------------------------------------

    def _open(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buffer, self.decoder = sock, bytearray(), Decoder()
        self.blocks: dict[bytes, tuple] = {}  # decoded header blocks that change no HPACK table
        self.next_stream, self.going_away = 1, False
        self.peer_window, self.peer_initial, self.peer_frame = DEFAULT_WINDOW, DEFAULT_WINDOW, DEFAULT_FRAME
        self.stream_window, self.consumed = DEFAULT_WINDOW, 0
        self.frames: bytearray | None = None
        ours = SettingsFrame(0, settings={SettingsFrame.ENABLE_PUSH: 0, SettingsFrame.INITIAL_WINDOW_SIZE: MAX_WINDOW})
        opening = WindowUpdateFrame(0, window_increment=MAX_WINDOW - DEFAULT_WINDOW)
        sock.sendall(PREFACE + ours.serialize() + opening.serialize())
        # the server's SETTINGS come first on its side (RFC 9113 3.4): its frame size shapes ours
        while True:
            kind, flags, _, payload, header = self._next()
            if kind == HeadersFrame.type:
                self._header_block(flags, payload)
                continue
            frame = self._control(header, payload)
            if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                break
        return sock

    def _build(self) -> bytearray:
        """HEADERS and DATA frames of the request (the header block, ~100 bytes, fits any frame
        size: no CONTINUATION); ``offsets`` are where each frame's stream id is patched per send."""
        frames: list[Frame] = [HeadersFrame(1, data=self.block, flags=("END_HEADERS",))]
        body, size = self.body, self.peer_frame
        for start in range(0, len(body), size):
            last = start + size >= len(body)
            frames.append(DataFrame(1, data=body[start : start + size], flags=("END_STREAM",) if last else ()))
        serialized = bytearray()
        self.offsets = []
        for frame in frames:
            self.offsets.append(len(serialized) + 5)
            serialized += frame.serialize()
        self.frames = serialized
        return serialized

    def _live(self) -> socket.socket:
        """The open connection; ConnectionClosed once it is closed."""
        if self.sock is None:
            raise ConnectionClosed("the connection is closed")
        return self.sock

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    # -- reading ----------------------------------------------------------------------------

    def _next(self) -> tuple[int, int, int, bytes, bytes]:
        """(type, flags, stream id, payload, 9-byte header) of the next frame."""
        buffer = self.buffer
        while len(buffer) < 9:
            self._fill()
        high, low, kind, flags, stream = _FRAME_HEADER.unpack_from(buffer)
        end = 9 + (high << 8 | low)
        while len(buffer) < end:
            self._fill(end - len(buffer))
        header, payload = bytes(buffer[:9]), bytes(buffer[9:end])
        del buffer[:end]
        return kind, flags, stream & 0x7FFFFFFF, payload, header

    def _fill(self, wanted: int = 0) -> None:
        chunk = self._live().recv(max(65536, wanted))
        if not chunk:
            raise ConnectionClosed("the server closed the connection")
        self.buffer += chunk

    def _header_block(self, flags: int, payload: bytes) -> tuple:
        """A HEADERS frame's block (with its CONTINUATIONs) decoded. Every block is decoded,
        whichever stream it is on, to keep the HPACK state in step with the server's."""
        start, stop = 0, len(payload)
        if flags & _PADDED:
            start, stop = 1, stop - payload[0]
        if flags & _PRIORITY:
            start += 5
        block = payload[start:stop]
        while not flags & _END_HEADERS:
            kind, flags, _, more, _ = self._next()
            if kind != ContinuationFrame.type:
                raise ValueError(f"HTTP/2: frame type {kind} inside a header block")
            block += more
        return self._decode(block)

    def _decode(self, block: bytes) -> tuple:
        """HPACK-decoded; a block of indexed fields only (each byte 1xxxxxxx: RFC 7541 6.1, one
        byte per field) changes no table, so its result is kept until a block that may change it."""
        known = self.blocks.get(block)
        if known is not None:
            return known
        headers = tuple(self.decoder.decode(block))
        if block and min(block) >= 0x80:
            self.blocks[block] = headers
        else:
            self.blocks.clear()
        return headers

    def _control(self, header: bytes, payload: bytes) -> Frame:
        """Any other frame, parsed by hyperframe; those of the connection acted on."""
        frame, _ = Frame.parse_frame_header(memoryview(header))
        frame.parse_body(memoryview(payload))
        if frame.stream_id == 0:
            self._connection_frame(frame)
        return frame

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
            self._live().sendall(SettingsFrame(0, flags=("ACK",)).serialize())
        elif isinstance(frame, PingFrame):
            if "ACK" not in frame.flags:
                self._live().sendall(PingFrame(0, opaque_data=frame.opaque_data, flags=("ACK",)).serialize())
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
            except ConnectionClosed:
                if not reused or self.aborted:
                    raise
                self.close()  # the server closed an idle connection: once more on a new one
                self._open()
                return self._exchange()
        except TimeoutError:
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
            frames = self.frames if self.frames is not None else self._build()
            for offset in self.offsets:
                struct.pack_into(">I", frames, offset, sid)
            self._live().sendall(frames)
            sent = len(body)
            self.peer_window -= sent
            self.stream_window -= sent
        else:  # larger than the server lets us send yet: as its WINDOW_UPDATEs allow
            self._live().sendall(HeadersFrame(sid, data=self.block, flags=("END_HEADERS",)).serialize())
            sent = self._push(sid, 0)
        return self._response(sid, sent)

    def _push(self, sid: int, sent: int) -> int:
        body = self.body
        while sent < len(body):
            room = min(self.peer_window, self.stream_window, self.peer_frame, len(body) - sent)
            if room <= 0:
                break
            last = sent + room >= len(body)
            frame = DataFrame(sid, data=body[sent : sent + room], flags=("END_STREAM",) if last else ())
            self._live().sendall(frame.serialize())
            sent += room
            self.peer_window -= room
            self.stream_window -= room
        return sent

    def _response(self, sid: int, sent: int) -> tuple[bool, Any]:
        """Frames until the stream ends: DATA, HEADERS and WINDOW_UPDATE read here (every
        response has them), the rest by hyperframe."""
        head = trailers = None
        parts: list[bytes] = []
        while True:
            kind, flags, stream, payload, header = self._next()
            if kind == DataFrame.type:
                self.consumed += len(payload)
                if stream == sid:
                    parts.append(payload[1 : len(payload) - payload[0]] if flags & _PADDED else payload)
            elif kind == HeadersFrame.type:
                headers = self._header_block(flags, payload)
                if stream == sid:
                    if head is None:
                        head = headers
                    else:
                        trailers = headers
            elif kind == WindowUpdateFrame.type and len(payload) == 4:
                increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
                if stream == 0:
                    self.peer_window += increment
                elif stream == sid:
                    self.stream_window += increment
            else:
                frame = self._control(header, payload)
                if stream == 0 and self.going_away and self.last_served < sid:
                    raise ConnectionClosed(f"the server is going away (GOAWAY, error code {self.goaway_code})")
                if stream == sid and isinstance(frame, RstStreamFrame):
                    return (
                        False,
                        f"{status_name(13)}: the server reset the stream (HTTP/2 error code {frame.error_code})",
                    )
            if stream == sid and flags & _END_STREAM and kind in (DataFrame.type, HeadersFrame.type):
                break
            if sent < len(self.body):
                sent = self._push(sid, sent)
        if self.consumed > _TOP_UP:
            self._live().sendall(WindowUpdateFrame(0, window_increment=self.consumed).serialize())
            self.consumed = 0
        return _outcome(head, trailers if trailers is not None else head, b"".join(parts))


def _outcome(head: tuple | None, trailers: tuple | None, data: bytes) -> tuple[bool, Any]:
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
    return True, data[5 : 5 + length]
