"""What the records of one exchange hold: the request as sent, the response head as received
(only what no longer describes the stored bytes changed), and revisits replay tools resolve."""

from __future__ import annotations

from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from crawler.store.base import Capture, Original
from crawler.store.warc import NOT_MODIFIED_PROFILE, REVISIT_PROFILE, WarcStore, stored_path

URL = "http://127.0.0.1:8/p?q=1"
SENT = (("Host", "127.0.0.1:8"), ("User-Agent", "ua/1"), ("If-None-Match", '"v"'),
        ("Accept", "*/*"), ("Accept-Encoding", "gzip, deflate, br"))


def records(root: Path, file: str, offset: int) -> list[tuple[str, dict[str, str], bytes]]:
    with stored_path(root, file).open("rb") as stream:
        stream.seek(offset)
        out = []
        for record in ArchiveIterator(stream):
            if out and record.rec_headers.get_header("WARC-Concurrent-To") is None:
                break
            # A response's payload; a request's or revisit's HTTP head (it has no payload).
            if record.rec_type in ("request", "revisit"):
                http = record.http_headers
                block = http.to_bytes() if http is not None else b""
            else:
                block = record.content_stream().read()
            out.append((record.rec_type, dict(record.rec_headers.headers), block))
        return out


def test_heads_as_received_and_revisits_replay_tools_resolve(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=1 << 30)
    received = (("ETag", '"v"'), ("Transfer-Encoding", "chunked"), ("Link", "<a>"),
                ("content-length", "999"), ("Link", "<b>"), ("x-low", "1"))
    body = b"<p>page</p>"
    response = store.write_response(Capture(
        URL, 1_700_000_000.5, 200, "OK", received, body, request_headers=SENT,
        request_target="/p?q=1", http_version="1.0"))
    first = records(tmp_path, response.file, response.offset)
    assert [r[0] for r in first] == ["response", "request"]
    raw = first[0][2]
    with stored_path(tmp_path, response.file).open("rb") as stream:
        stream.seek(response.offset)
        record = next(iter(ArchiveIterator(stream)))
        head = record.http_headers
        assert head.statusline == "200 OK" and head.protocol == "HTTP/1.0"
        # Chunking undone, so Transfer-Encoding goes; the length is the stored one, in place.
        assert head.headers == [("ETag", '"v"'), ("Link", "<a>"),
                                ("content-length", str(len(body))), ("Link", "<b>"),
                                ("x-low", "1")]
    assert raw == body
    request_block = first[1][2]
    assert request_block == (b"GET /p?q=1 HTTP/1.1\r\n"
                             + b"".join(f"{k}: {v}\r\n".encode() for k, v in SENT) + b"\r\n")

    original = Original(URL, 1_700_000_000.5, response.record_id, response.payload_digest)
    # A 200 with the same bytes: its own head (Content-Length as received: the original's
    # payload is this one's), the identical-payload-digest profile.
    same = store.write_revisit(Capture(
        URL, 1_700_000_002.0, 200, "OK", (("ETag", '"v"'), ("Content-Length", "11")), body,
        request_headers=SENT), original)
    revisit, request = records(tmp_path, same.file, same.offset)
    assert revisit[1]["WARC-Profile"] == REVISIT_PROFILE
    assert revisit[2] == b'HTTP/1.1 200 OK\r\nETag: "v"\r\nContent-Length: 11\r\n\r\n'
    assert request[0] == "request"

    # A 304: server-not-modified, no block, and its header fields in a metadata record.
    not_modified = store.write_revisit(Capture(
        URL, 1_700_000_004.0, 304, "Not Modified", (("ETag", '"v"'), ("Date", "x")), b"",
        request_headers=SENT, body_read=False), original)
    revisit, request, metadata = records(tmp_path, not_modified.file, not_modified.offset)
    headers = revisit[1]
    assert headers["WARC-Profile"] == NOT_MODIFIED_PROFILE
    assert headers["Content-Length"] == "0" and "Content-Type" not in headers
    assert headers["WARC-Refers-To"] == response.record_id
    assert headers["WARC-Refers-To-Target-URI"] == URL
    assert headers["WARC-Refers-To-Date"] == "2023-11-14T22:13:20.500000Z"
    assert headers["WARC-Payload-Digest"] == response.payload_digest
    assert revisit[2] == b""
    assert request[0] == "request"
    assert metadata[0] == "metadata"
    assert metadata[1]["Content-Type"] == "application/warc-fields"
    assert metadata[2] == b'ETag: "v"\r\nDate: x\r\n'
    store.close()


def test_a_capture_without_the_request_as_sent_gets_a_host(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=1 << 30)
    stored = store.write_response(Capture(URL, 1.0, 200, "OK", (), b"x",
                                          request_headers=(("User-Agent", "ua"),)))
    request = records(tmp_path, stored.file, stored.offset)[1]
    assert request[2] == b"GET /p?q=1 HTTP/1.1\r\nHost: 127.0.0.1:8\r\nUser-Agent: ua\r\n\r\n"
    store.close()
