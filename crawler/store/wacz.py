"""WACZ 1.1.1 packages of WARC files: what ReplayWeb.page and pywb open as they are.

A package is a ZIP file (https://specs.webrecorder.net/wacz/1.1.1/):

- ``archive/``: the WARC files, stored as they are (each record is already its own gzip
  member, so deflating them again would only cost time, and ranges stay readable in place);
- ``indexes/index.cdx``: one CDXJ line per capture (``urlkey timestamp {json}``, sorted), as
  pywb's indexer writes it (``wb-manager add --unpack-wacz`` takes ``*.cdx`` indexes only);
- ``pages/pages.jsonl``: the pages list that viewers open first;
- ``datapackage.json``: every file above with its SHA-256 and size, and
  ``datapackage-digest.json`` the SHA-256 of ``datapackage.json``.

URL keys are SURTs computed by ``surt``, which pywb canonicalizes its lookups with.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from warcio.archiveiterator import ArchiveIterator
from warcio.timeutils import iso_date_to_timestamp

from crawler import __version__

WACZ_VERSION = "1.1.1"
PAGES_HEADER = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
COPY_CHUNK = 1 << 20
# Captures a replay serves: a request, warcinfo or metadata record is never a page.
_INDEXED_TYPES = frozenset({"response", "revisit", "resource"})


@dataclass(frozen=True, slots=True)
class Page:
    """One entry of ``pages/pages.jsonl``: a URL and the capture a viewer opens it at."""

    url: str
    fetched_at: dt.datetime


@dataclass(frozen=True, slots=True)
class WarcSource:
    """A WARC file to package: its name in ``archive/``, its path, and how many of its bytes
    (a file still being written is taken up to its last complete record)."""

    name: str
    path: Path
    length: int


def url_key(url: str) -> str:
    """The SURT key pywb looks a URL up by."""
    import surt

    return str(surt.surt(url))


def _cdxj_lines(source: WarcSource) -> Iterator[str]:
    """The CDXJ lines of ``source``'s captures, as pywb's indexer writes them."""
    with source.path.open("rb") as raw:
        stream = _Bounded(raw, source.length)
        records = ArchiveIterator(stream)
        for record in records:
            if record.rec_type not in _INDEXED_TYPES:
                continue
            url = record.rec_headers.get_header("WARC-Target-URI")
            date = record.rec_headers.get_header("WARC-Date")
            if not url or not date:
                continue
            entry: dict[str, Any] = {"url": url}
            http = record.http_headers
            if record.rec_type == "revisit":
                entry["mime"] = "warc/revisit"
            else:
                content_type = http.get_header("Content-Type") if http is not None else None
                entry["mime"] = (content_type or "unk").split(";", 1)[0].strip() or "unk"
                code = http.get_statuscode() if http is not None else None
                if code:
                    entry["status"] = code
            digest = record.rec_headers.get_header("WARC-Payload-Digest")
            if digest:
                entry["digest"] = digest.removeprefix("sha1:")
            records.read_to_end(record)
            entry["length"] = str(records.get_record_length())
            entry["offset"] = str(records.get_record_offset())
            entry["filename"] = source.name
            yield f"{url_key(url)} {iso_date_to_timestamp(date)} {json.dumps(entry)}\n"


class _Bounded:
    """The first ``limit`` bytes of a file, read-only (warcio reads no further)."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        self.raw = raw
        self.left = limit

    def _take(self, read: Callable[[int], bytes], size: int | None) -> bytes:
        if self.left <= 0:
            return b""
        data = read(self.left if size is None or size < 0 else min(size, self.left))
        self.left -= len(data)
        return data

    def read(self, size: int = -1) -> bytes:
        return self._take(self.raw.read, size)

    def readline(self, size: int = -1) -> bytes:
        return self._take(self.raw.readline, size)


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_wacz(
    target: Path, sources: Iterable[WarcSource], pages: Iterable[Page], *, title: str
) -> int:
    """Write the package to ``target``; the number of captures indexed."""
    resources: list[dict[str, Any]] = []
    lines: list[str] = []
    created = dt.datetime.now(dt.UTC)
    stamp = created.timetuple()[:6]

    def member(archive: zipfile.ZipFile, name: str, data: Iterable[bytes],
               compress: int) -> None:
        info = zipfile.ZipInfo(name, date_time=stamp)
        info.compress_type = compress
        sha256, size = hashlib.sha256(), 0  # of the member, for datapackage.json
        with archive.open(info, "w", force_zip64=True) as out:
            for chunk in data:
                out.write(chunk)
                sha256.update(chunk)
                size += len(chunk)
        resources.append({"name": Path(name).name, "path": name,
                          "hash": "sha256:" + sha256.hexdigest(), "bytes": size})

    with zipfile.ZipFile(target, "w", allowZip64=True) as archive:
        for source in sources:
            member(archive, f"archive/{source.name}", _file_chunks(source),
                   zipfile.ZIP_STORED)
            lines.extend(_cdxj_lines(source))
        lines.sort()
        member(archive, "indexes/index.cdx", [("".join(lines)).encode()],
               zipfile.ZIP_DEFLATED)
        page_lines = [json.dumps(PAGES_HEADER) + "\n"]
        for n, page in enumerate(pages):
            page_lines.append(json.dumps({"id": f"p{n}", "url": page.url,
                                          "ts": _iso(page.fetched_at), "title": page.url})
                              + "\n")
        member(archive, "pages/pages.jsonl", ["".join(page_lines).encode()],
               zipfile.ZIP_DEFLATED)
        package = json.dumps({
            "profile": "data-package",
            "wacz_version": WACZ_VERSION,
            "title": title,
            "created": _iso(created),
            "software": f"crawler/{__version__}",
            "resources": resources,
        }, indent=2).encode()
        archive.writestr(zipfile.ZipInfo("datapackage.json", stamp), package,
                         zipfile.ZIP_DEFLATED)
        digest = json.dumps({"path": "datapackage.json",
                             "hash": "sha256:" + hashlib.sha256(package).hexdigest()})
        archive.writestr(zipfile.ZipInfo("datapackage-digest.json", stamp), digest,
                         zipfile.ZIP_DEFLATED)
    return len(lines)


def _file_chunks(source: WarcSource) -> Iterator[bytes]:
    left = source.length
    with source.path.open("rb") as file:
        while left > 0:
            chunk = file.read(min(COPY_CHUNK, left))
            if not chunk:
                raise OSError(f"{source.path} is shorter than {source.length} bytes")
            left -= len(chunk)
            yield chunk
