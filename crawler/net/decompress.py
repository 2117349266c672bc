"""Content-Encoding decoding with a hard cap on the decoded size.

aiohttp's own decompression cannot be bounded, so bodies are read raw and decoded here as they
arrive. Every stage of a chain (``gzip, br`` is undone right to left) stops at the cap, so a
bomb costs at most the cap in memory and time, and no more of it is read from the network.
"""

from __future__ import annotations

import zlib

import brotli
import zstandard

ZSTD_WRITE_BYTES = 64 * 1024


class DecodeError(Exception):
    """The body is not valid data in its declared encoding."""


class UnsupportedEncoding(Exception):
    """A Content-Encoding we cannot decode (e.g. ``compress``)."""


class _Stage:
    def feed(self, data: bytes, limit: int) -> bytes:
        """Decode ``data``; return at most about ``limit`` bytes (the caller stops past it)."""
        raise NotImplementedError

    def finish(self, limit: int) -> bytes:
        """Whatever is still buffered at the end of the input."""
        return b""


class _Zlib(_Stage):
    """gzip (wbits 47 also accepts zlib) and deflate (zlib-wrapped or, as often sent, raw)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self.decoder: zlib._Decompress | None = None
        if encoding == "gzip":
            self.decoder = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)

    def _start(self, data: bytes) -> zlib._Decompress:
        if self.decoder is None:
            # RFC 9110 says deflate is zlib-wrapped; many servers send raw deflate.
            zlib_header = (
                len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            )
            wbits = zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS
            self.decoder = zlib.decompressobj(wbits=wbits)
        return self.decoder

    def feed(self, data: bytes, limit: int) -> bytes:
        if not data:
            return b""
        decoder = self._start(data)
        try:
            out = decoder.decompress(data, max(1, limit))
            # Concatenated gzip members: start over on what follows the first one.
            gzip = self.encoding == "gzip"
            while gzip and decoder.eof and decoder.unused_data and len(out) < limit:
                rest = decoder.unused_data
                decoder = self.decoder = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
                out += decoder.decompress(rest, max(1, limit - len(out)))
        except zlib.error as exc:
            raise DecodeError(str(exc)) from exc
        if decoder.unconsumed_tail:
            out += b"\0"  # more output is pending past the limit: tell the caller it is over
        return out

    def finish(self, limit: int) -> bytes:
        if self.decoder is None:
            return b""
        try:
            return self.decoder.flush()[: limit + 1]
        except zlib.error as exc:
            raise DecodeError(str(exc)) from exc


class _Brotli(_Stage):
    def __init__(self) -> None:
        self.decoder = brotli.Decompressor()

    def feed(self, data: bytes, limit: int) -> bytes:
        try:
            out: bytes = self.decoder.process(data, output_buffer_limit=max(1, limit))
            if len(out) < limit and not self.decoder.can_accept_more_data():
                out += self.decoder.process(b"", output_buffer_limit=max(1, limit - len(out)))
        except brotli.error as exc:
            raise DecodeError(str(exc)) from exc
        if not self.decoder.can_accept_more_data():
            out += b"\0"  # output pending past the limit
        return out


class _Full(Exception):
    pass


class _Sink:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.limit = 0

    def write(self, data: bytes) -> int:
        self.chunks.append(bytes(data))
        self.size += len(data)
        if self.size > self.limit:
            raise _Full  # stops the decompressor mid-stream: nothing more is produced
        return len(data)


class _Zstd(_Stage):
    """zstd's streaming decompressor cannot bound its output; its stream writer can, through
    a sink that raises once the limit is passed (output arrives in 64 KiB pieces)."""

    def __init__(self) -> None:
        self.sink = _Sink()
        self.writer = zstandard.ZstdDecompressor().stream_writer(
            self.sink,  # type: ignore[arg-type]  # only write() is called
            write_size=ZSTD_WRITE_BYTES, closefd=False
        )

    def feed(self, data: bytes, limit: int) -> bytes:
        self.sink.chunks, self.sink.size, self.sink.limit = [], 0, limit
        try:
            self.writer.write(data)
        except _Full:
            pass
        except zstandard.ZstdError as exc:
            raise DecodeError(str(exc)) from exc
        return b"".join(self.sink.chunks)


def _stage(encoding: str) -> _Stage:
    if encoding in ("gzip", "x-gzip"):
        return _Zlib("gzip")
    if encoding == "deflate":
        return _Zlib("deflate")
    if encoding == "br":
        return _Brotli()
    if encoding == "zstd":
        return _Zstd()
    raise UnsupportedEncoding(encoding)


class CappedDecoder:
    """Undoes a Content-Encoding list, producing at most ``cap`` bytes in total; once
    ``exceeded`` is set the output has been cut at the cap and the caller must stop reading."""

    def __init__(self, content_encoding: str | None, cap: int) -> None:
        names = [part.strip().lower() for part in (content_encoding or "").split(",")]
        # Applied left to right by the server, so undone right to left.
        self.stages = [_stage(name) for name in reversed(names) if name and name != "identity"]
        self.cap = cap
        self.produced = [0] * len(self.stages)
        self.size = 0
        self.exceeded = False

    def _run(self, data: bytes, final: bool) -> bytes:
        for index, stage in enumerate(self.stages):
            limit = self.cap + 1 - self.produced[index]
            out = stage.feed(data, limit) if data else b""
            if final:
                out += stage.finish(limit - len(out))
            self.produced[index] += len(out)
            if self.produced[index] > self.cap:
                self.exceeded = True
                out = out[: max(0, self.cap - (self.produced[index] - len(out)))]
            data = out
        room = self.cap - self.size
        if len(data) > room:
            self.exceeded = True
            data = data[:room]
        self.size += len(data)
        return data

    def feed(self, data: bytes) -> bytes:
        return b"" if self.exceeded else self._run(data, final=False)

    def finish(self) -> bytes:
        return b"" if self.exceeded else self._run(b"", final=True)
