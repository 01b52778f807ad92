"""SPDY/3.1 framing, both ends: what the Kubernetes streaming protocols (exec, attach, port-forward) run over.

The apiserver and containerd's streaming server speak SPDY/3.1 as moby/spdystream does: after an HTTP/1.1 upgrade
(`Upgrade: SPDY/3.1`), each side opens streams with SYN_STREAM (the client's ids odd, the server's even), the peer
answers each with SYN_REPLY, and bytes go in DATA frames; a frame with the FIN flag ends its sender's half of a
stream. Header blocks are name/value pairs, each a 32-bit length and the bytes, compressed with one zlib stream per
direction (a sync flush after each block) seeded with the dictionary of the SPDY/3 draft (section 2.6.10.1).
spdystream implements no flow control: WINDOW_UPDATE and SETTINGS frames are read and dropped, and this module
sends none.

Only the frames the streaming protocols use are built; any other control frame is read whole and returned as
`Unknown`, so a peer's extra frames never break the framing.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

VERSION = 3
SYN_STREAM = 1
SYN_REPLY = 2
RST_STREAM = 3
SETTINGS = 4
PING = 6
GOAWAY = 7
HEADERS = 8
WINDOW_UPDATE = 9

FLAG_FIN = 0x01
MAX_LENGTH = (1 << 24) - 1
STREAM_ID_MASK = 0x7FFFFFFF
RST_PROTOCOL_ERROR = 1
RST_CANCEL = 5
GOAWAY_OK = 0

# A header block larger than this, once inflated, is refused (spdystream has no bound; a fake need not follow).
MAX_HEADER_BLOCK = 1 << 20


def _dictionary() -> bytes:
    """The SPDY/3 header dictionary: header names and common values, each with its 32-bit length, then a run of
    status codes, reason phrases, date words and media types without lengths (1,423 bytes, no trailing NUL, as
    spdystream's `headerDictionary`; a peer's zlib header names its Adler-32, which must match)."""
    names = (
        "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age"
        " allow authorization cache-control connection content-base content-encoding content-language"
        " content-length content-location content-md5 content-range content-type date etag expect expires from host"
        " if-match if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards"
        " pragma proxy-authenticate proxy-authorization range referer retry-after server te trailer"
        " transfer-encoding upgrade user-agent vary via warning www-authenticate method get status"
    )
    words = [*names.split(), "200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
    prefixed = b"".join(struct.pack("!I", len(word)) + word.encode() for word in words)
    codes = "100 101 201 202 205 206 300 302 303 304 305 306 307 402 405 406 407 408 409 410 411 412 413 414 415 416"
    codes += " 417 502 504 505"
    phrases = (
        "203 Non-Authoritative Information",
        "204 No Content",
        "301 Moved Permanently",
        "400 Bad Request",
        "401 Unauthorized",
        "403 Forbidden",
        "404 Not Found",
        "500 Internal Server Error",
        "501 Not Implemented",
        "503 Service Unavailable",
    )
    dates = "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    media = (
        "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
        "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
    )
    tail = "".join(codes.split()) + "".join(phrases) + dates + media
    return prefixed + tail.encode()


DICTIONARY = _dictionary()

Headers = dict[str, list[str]]


class SpdyError(Exception):
    """A frame that breaks the protocol, or a connection that ended inside a frame."""


@dataclass(frozen=True)
class SynStream:
    stream_id: int
    headers: Headers
    fin: bool = False
    associated_to: int = 0
    priority: int = 0


@dataclass(frozen=True)
class SynReply:
    stream_id: int
    headers: Headers
    fin: bool = False


@dataclass(frozen=True)
class Data:
    stream_id: int
    data: bytes
    fin: bool = False


@dataclass(frozen=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True)
class Ping:
    ping_id: int


@dataclass(frozen=True)
class GoAway:
    last_good_stream_id: int
    status: int = GOAWAY_OK


@dataclass(frozen=True)
class HeadersFrame:
    stream_id: int
    headers: Headers
    fin: bool = False


@dataclass(frozen=True)
class Unknown:
    """A control frame this module does not act on (SETTINGS, WINDOW_UPDATE, or a type it does not know)."""

    frame_type: int
    flags: int
    payload: bytes = field(repr=False)


Frame = SynStream | SynReply | Data | RstStream | Ping | GoAway | HeadersFrame | Unknown


def encode_header_block(headers: Mapping[str, Sequence[str]]) -> bytes:
    """Name/value pairs, each a 32-bit length then the bytes; several values of one name joined by NUL. Names are
    lowercased, as SPDY requires."""
    out = bytearray(struct.pack("!I", len(headers)))
    for name, values in headers.items():
        key = name.lower().encode()
        value = b"\x00".join(v.encode() for v in values)
        out += struct.pack("!I", len(key)) + key + struct.pack("!I", len(value)) + value
    return bytes(out)


def decode_header_block(block: bytes) -> Headers:
    try:
        (count,) = struct.unpack_from("!I", block, 0)
        at = 4
        headers: Headers = {}
        for _ in range(count):
            (size,) = struct.unpack_from("!I", block, at)
            name = block[at + 4 : at + 4 + size].decode()
            at += 4 + size
            (size,) = struct.unpack_from("!I", block, at)
            value = block[at + 4 : at + 4 + size].decode()
            at += 4 + size
            if at > len(block):
                raise SpdyError("a header block shorter than its lengths")
            headers.setdefault(name.lower(), []).extend(value.split("\x00"))
    except (struct.error, UnicodeDecodeError) as exc:
        raise SpdyError(f"a header block that does not parse: {exc}") from exc
    return headers


class Framer:
    """Reads and writes frames on one connection; the two zlib contexts live as long as it does."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, initial: bytes = b"") -> None:
        """`initial`: bytes of the connection read already (what followed the HTTP upgrade in the same read)."""
        self.reader = reader
        self.writer = writer
        self._buffered = bytearray(initial)
        self._compress = zlib.compressobj(level=9, zdict=DICTIONARY)
        self._decompress = zlib.decompressobj(zdict=DICTIONARY)

    # --- writing ---------------------------------------------------------------------------------------------

    def _control(self, frame_type: int, flags: int, payload: bytes) -> None:
        if len(payload) > MAX_LENGTH:
            raise SpdyError(f"a control frame of {len(payload)} bytes")
        head = struct.pack("!HHI", 0x8000 | VERSION, frame_type, (flags << 24) | len(payload))
        self.writer.write(head + payload)

    def _headers(self, headers: Mapping[str, Sequence[str]]) -> bytes:
        block = encode_header_block(headers)
        return self._compress.compress(block) + self._compress.flush(zlib.Z_SYNC_FLUSH)

    def syn_stream(self, stream_id: int, headers: Mapping[str, Sequence[str]], *, fin: bool = False) -> None:
        payload = struct.pack("!IIBB", stream_id & STREAM_ID_MASK, 0, 0, 0) + self._headers(headers)
        self._control(SYN_STREAM, FLAG_FIN if fin else 0, payload)

    def syn_reply(self, stream_id: int, headers: Mapping[str, Sequence[str]] | None = None) -> None:
        payload = struct.pack("!I", stream_id & STREAM_ID_MASK) + self._headers(headers or {})
        self._control(SYN_REPLY, 0, payload)

    def data(self, stream_id: int, data: bytes, *, fin: bool = False) -> None:
        view = memoryview(data)
        while len(view) > MAX_LENGTH:
            self._data(stream_id, bytes(view[:MAX_LENGTH]), False)
            view = view[MAX_LENGTH:]
        self._data(stream_id, bytes(view), fin)

    def _data(self, stream_id: int, data: bytes, fin: bool) -> None:
        flags = FLAG_FIN if fin else 0
        self.writer.write(struct.pack("!II", stream_id & STREAM_ID_MASK, (flags << 24) | len(data)) + data)

    def rst_stream(self, stream_id: int, status: int) -> None:
        self._control(RST_STREAM, 0, struct.pack("!II", stream_id & STREAM_ID_MASK, status))

    def ping(self, ping_id: int) -> None:
        self._control(PING, 0, struct.pack("!I", ping_id))

    def goaway(self, last_good_stream_id: int, status: int = GOAWAY_OK) -> None:
        self._control(GOAWAY, 0, struct.pack("!II", last_good_stream_id & STREAM_ID_MASK, status))

    async def drain(self) -> None:
        await self.writer.drain()

    # --- reading ---------------------------------------------------------------------------------------------

    async def _readexactly(self, size: int) -> bytes:
        if not self._buffered:
            return await self.reader.readexactly(size)
        taken = bytes(self._buffered[:size])
        del self._buffered[:size]
        if len(taken) == size:
            return taken
        try:
            return taken + await self.reader.readexactly(size - len(taken))
        except asyncio.IncompleteReadError as exc:
            raise asyncio.IncompleteReadError(taken + exc.partial, size) from exc

    async def read(self) -> Frame | None:
        """The next frame, or None when the peer closed the connection between frames."""
        try:
            head = await self._readexactly(8)
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                return None
            raise SpdyError("the connection ended inside a frame header") from exc
        first, second = struct.unpack("!II", head)
        flags, length = second >> 24, second & MAX_LENGTH
        try:
            payload = await self._readexactly(length)
        except asyncio.IncompleteReadError as exc:
            raise SpdyError("the connection ended inside a frame") from exc
        if not first & 0x80000000:
            return Data(first & STREAM_ID_MASK, payload, bool(flags & FLAG_FIN))
        version, frame_type = (first >> 16) & 0x7FFF, first & 0xFFFF
        if version != VERSION:
            raise SpdyError(f"a control frame of SPDY version {version}")
        return self._control_frame(frame_type, flags, payload)

    def _inflate(self, compressed: bytes) -> Headers:
        try:
            block = self._decompress.decompress(compressed, MAX_HEADER_BLOCK)
        except zlib.error as exc:
            raise SpdyError(f"a header block that does not inflate: {exc}") from exc
        if self._decompress.unconsumed_tail:
            raise SpdyError(f"a header block over {MAX_HEADER_BLOCK} bytes")
        return decode_header_block(block)

    def _control_frame(self, frame_type: int, flags: int, payload: bytes) -> Frame:
        fin = bool(flags & FLAG_FIN)
        try:
            if frame_type == SYN_STREAM:
                stream_id, associated, priority, _ = struct.unpack_from("!IIBB", payload)
                return SynStream(
                    stream_id & STREAM_ID_MASK,
                    self._inflate(payload[10:]),
                    fin,
                    associated & STREAM_ID_MASK,
                    priority >> 5,
                )
            if frame_type in (SYN_REPLY, HEADERS):
                (stream_id,) = struct.unpack_from("!I", payload)
                headers = self._inflate(payload[4:])
                if frame_type == SYN_REPLY:
                    return SynReply(stream_id & STREAM_ID_MASK, headers, fin)
                return HeadersFrame(stream_id & STREAM_ID_MASK, headers, fin)
            if frame_type == RST_STREAM:
                stream_id, status = struct.unpack_from("!II", payload)
                return RstStream(stream_id & STREAM_ID_MASK, status)
            if frame_type == PING:
                return Ping(struct.unpack_from("!I", payload)[0])
            if frame_type == GOAWAY:
                last, status = struct.unpack_from("!II", payload)
                return GoAway(last & STREAM_ID_MASK, status)
        except struct.error as exc:
            raise SpdyError(f"a control frame of type {frame_type} too short: {len(payload)} bytes") from exc
        return Unknown(frame_type, flags, payload)
