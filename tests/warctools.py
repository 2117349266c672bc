"""Check WARC files with warcio's own command line (``warcio check`` and ``warcio index``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from crawler.store.base import payload_digest
from crawler.store.warc import read_record


def warcio(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warcio.cli", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def check_files(paths: list[Path]) -> None:
    """``warcio check`` passes on every file, and ``warcio index`` reads every record (one
    warcinfo per file, at its start)."""
    assert paths
    names = [str(p) for p in paths]
    checked = warcio("check", "-v", *names)
    assert checked.returncode == 0, (checked.stdout[-2000:], checked.stderr[-2000:])
    assert "fail" not in checked.stdout.replace("digest pass", ""), checked.stdout[-2000:]
    indexed = warcio("index", "-f", "warc-type,offset", *names)
    assert indexed.returncode == 0, indexed.stderr[-2000:]
    rows = [json.loads(line) for line in indexed.stdout.splitlines()]
    starts = [r for r in rows if r["warc-type"] == "warcinfo"]
    assert len(starts) == len(paths) and all(r["offset"] == "0" for r in starts), starts
    assert len(rows) > len(paths)


def index_offsets(path: Path) -> dict[int, str]:
    """Record offset -> WARC-Type, as ``warcio index`` reads the file."""
    indexed = warcio("index", "-f", "warc-type,offset", str(path))
    assert indexed.returncode == 0, indexed.stderr[-2000:]
    return {int(r["offset"]): r["warc-type"]
            for r in map(json.loads, indexed.stdout.splitlines())}


def check_index_rows(root: Path, rows: list[dict[str, object]]) -> None:
    """Every index row reads back a record of its type whose payload digest (and URI, when
    the row has one) matches; every revisit refers to a response record that exists, by its
    id and by the URI and date it was stored under (what replay tools look it up by)."""
    by_record_id = {r["record_id"]: r for r in rows}
    for row in rows:
        record = read_record(root, str(row["warc_file"]), int(row["warc_offset"]))  # type: ignore[call-overload]
        assert record.record_type == row["record_type"], row
        assert record.warc_header("WARC-Record-ID") == row["record_id"]
        assert record.warc_header("WARC-Payload-Digest") == row["payload_digest"]
        if row.get("target_uri") is not None:
            assert record.warc_header("WARC-Target-URI") == row["target_uri"], row
        if row["record_type"] == "response":
            assert payload_digest(record.stored_payload) == row["payload_digest"], row
        else:
            original = by_record_id[row["refers_to"]]
            assert original["record_type"] == "response"
            assert record.warc_header("WARC-Refers-To") == original["record_id"]
            back = read_record(root, str(original["warc_file"]), int(original["warc_offset"]))  # type: ignore[call-overload]
            assert payload_digest(back.stored_payload) == row["payload_digest"]
            for refers, header in (("WARC-Refers-To-Target-URI", "WARC-Target-URI"),
                                   ("WARC-Refers-To-Date", "WARC-Date")):
                assert record.warc_header(refers) == back.warc_header(header), (row, refers)
