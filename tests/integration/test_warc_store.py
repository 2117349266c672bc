"""The WARC store on real files: warcio reads what it writes, rotation, torn-tail recovery."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from warctools import check_files, index_offsets

from crawler.settings import Settings
from crawler.store.base import Capture, Original, payload_digest
from crawler.store.warc import (
    GZIP_LEVEL,
    OPEN_SUFFIX,
    SUFFIX,
    WarcStore,
    complete_prefix,
    recover,
)


def capture(n: int, body: bytes | None = None, status: int = 200) -> Capture:
    payload = body if body is not None else f"<html><body><p>version {n}</p></body></html>".encode()
    return Capture(
        url=f"http://127.0.0.1:9/page{n % 3}", fetched_at=1_800_000_000.0 + n, status=status,
        reason="OK", payload=payload,
        response_headers=(("Content-Type", "text/html; charset=utf-8"),
                          ("Content-Encoding", "gzip"), ("Content-Length", "12")),
        request_headers=(("User-Agent", "crawler-test"),),
    )


def test_records_read_back_and_warcio_checks_every_file(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=4000, writer_name="t")
    written = []
    for n in range(40):
        c = capture(n)
        stored = store.write_response(c)
        written.append((stored, c))
        if n % 4 == 0:
            revisit = store.write_revisit(
                c, Original(c.url, c.fetched_at, stored.record_id, stored.payload_digest)
            )
            written.append((revisit, c))
    store.close()
    files = sorted(tmp_path.glob("*" + SUFFIX))
    assert len(files) > 3, "max_bytes rotates files"
    assert not list(tmp_path.glob("*" + OPEN_SUFFIX))
    check_files(files)
    offsets = {f.name: index_offsets(f) for f in files}
    for stored, c in written:
        assert offsets[stored.file][stored.offset] == stored.record_type
        record = store.read(stored.file, stored.offset)
        assert record.record_type == stored.record_type
        assert record.warc_header("WARC-Payload-Digest") == payload_digest(c.payload)
        if stored.record_type == "response":
            assert record.payload == c.payload
            # The stored payload is decoded: the headers no longer claim an encoding.
            assert record.http_header("Content-Encoding") is None
            assert record.http_header("Content-Length") == str(len(c.payload))
        else:
            assert record.warc_header("WARC-Profile", ).endswith(  # type: ignore[union-attr]
                "/warc/1.1/revisit/identical-payload-digest")


def test_torn_tail_is_cut_on_start_and_writing_goes_on_in_a_new_file(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=10**9, writer_name="crashed")
    kept = [store.write_response(capture(n)) for n in range(5)]
    open_path = tmp_path / (kept[0].file + OPEN_SUFFIX)
    good_size = open_path.stat().st_size
    assert complete_prefix(open_path) == good_size
    # A crash in the middle of a record: half of a gzip member at the end.
    half = store._file  # the writer dies without closing: simulate by abandoning it
    with open_path.open("ab") as raw:
        raw.write(open_path.read_bytes()[kept[1].offset : kept[1].offset + kept[1].length // 2])
    assert half is not None
    half.close()  # releases the writer's lock, as the process's death would
    assert complete_prefix(open_path) == good_size

    restarted = WarcStore(tmp_path, max_bytes=10**9, writer_name="new")
    assert [r.name for r in restarted.recovered] == [kept[0].file]
    closed = tmp_path / kept[0].file
    assert closed.stat().st_size == good_size
    fresh = restarted.write_response(capture(99))
    assert fresh.file != kept[0].file
    restarted.close()
    check_files(sorted(tmp_path.glob("*" + SUFFIX)))
    for stored in kept:
        assert restarted.read(stored.file, stored.offset).payload == capture(
            kept.index(stored)).payload


def test_a_live_writers_open_file_is_left_alone(tmp_path: Path) -> None:
    live = WarcStore(tmp_path, max_bytes=10**9, writer_name="live")
    stored = live.write_response(capture(1))
    assert recover(tmp_path) == []
    assert (tmp_path / (stored.file + OPEN_SUFFIX)).exists()
    live.close()
    assert (tmp_path / stored.file).exists()


def test_an_encoded_body_is_stored_as_received_and_read_back_decoded(tmp_path: Path) -> None:
    """Content-Encoding kept, the bytes as sent in the record, the digest theirs; reading
    undoes the encoding (a chain too) and a revisit keeps the exchange's headers."""
    import gzip
    import zlib

    page = b"<html><body>" + b"<p>same words again</p>" * 200 + b"</body></html>"
    deflated = zlib.compress(page)
    wires = {"gzip": gzip.compress(page, mtime=0), "deflate": deflated,
             "deflate, gzip": gzip.compress(deflated, mtime=0)}
    store = WarcStore(tmp_path, max_bytes=1 << 20, writer_name="t")
    written = []
    for n, (encoding, wire) in enumerate(wires.items()):
        c = Capture(
            url=f"http://127.0.0.1:9/enc{n}", fetched_at=1_800_000_000.0 + n, status=200,
            reason="OK", payload=page, wire_payload=wire,
            response_headers=(("Content-Type", "text/html"), ("Content-Encoding", encoding),
                              ("Transfer-Encoding", "chunked")),
        )
        stored = store.write_response(c)
        revisit = store.write_revisit(
            c, Original(c.url, c.fetched_at, stored.record_id, stored.payload_digest))
        written.append((encoding, wire, stored, revisit))
    store.close()
    check_files(sorted(tmp_path.glob("*" + SUFFIX)))
    for encoding, wire, stored, revisit in written:
        assert stored.payload_digest == payload_digest(wire) != payload_digest(page)
        assert stored.payload_bytes == len(wire)
        record = store.read(stored.file, stored.offset)
        assert record.stored_payload == wire and record.payload == page
        assert record.warc_header("WARC-Payload-Digest") == payload_digest(wire)
        assert record.http_header("Content-Encoding") == encoding
        assert record.http_header("Content-Length") == str(len(wire))
        assert record.http_header("Transfer-Encoding") is None
        again = store.read(revisit.file, revisit.offset)
        assert again.http_header("Content-Encoding") == encoding
        assert again.warc_header("WARC-Payload-Digest") == payload_digest(wire)


def test_the_gzip_level_trades_cpu_for_size_and_every_level_reads_back(tmp_path: Path) -> None:
    """CRAWLER_WARC_GZIP_LEVEL reaches the records: the same HTML stored at level 1 takes more
    bytes than at 12, and both files are WARC that warcio reads back whole."""
    words = " ".join(f"word{n % 97} term{n % 13}" for n in range(3000))
    body = f"<html><body><p>{words}</p></body></html>".encode()
    sizes = {}
    for level in (1, 12):
        root = tmp_path / str(level)
        store = WarcStore(root, max_bytes=10**9, writer_name="t", gzip_level=level)
        stored = store.write_response(capture(0, body))
        assert store.read(stored.file, stored.offset).payload == body
        store.close()
        [file] = sorted(root.glob("*" + SUFFIX))
        check_files([file])
        sizes[level] = stored.length
    assert sizes[1] > sizes[12]


def test_a_gzip_level_outside_libdeflates_range_is_refused() -> None:
    for level in (0, 13):
        with pytest.raises(ValidationError, match="warc_gzip_level"):
            Settings(warc_gzip_level=level)
    assert Settings().warc_gzip_level == GZIP_LEVEL == 6
