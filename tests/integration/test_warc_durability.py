"""The WARC store's file handling under faults, on real files: a partial write cut back at
once, a deleted directory never written into, recovery that keeps every indexed byte, a
group fsync, and reads that say what is wrong in one line."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from storagefaults import fill, tiny_tmpfs
from warctools import check_files

from crawler.store.base import Capture
from crawler.store.damage import CORRUPT, DIGEST, MISSING, TRUNCATED, RecordDamaged
from crawler.store.durable import DurableStore
from crawler.store.health import DIRECTORY_GONE, DISK_FULL, StorageError
from crawler.store.warc import (
    OPEN_SUFFIX,
    SUFFIX,
    WarcStore,
    check_digest,
    complete_prefix,
    read_record,
)


def capture(n: int, size: int = 200) -> Capture:
    # Random bytes: they do not compress, so the record's size on disk is about ``size``.
    payload = os.urandom(size // 2).hex().encode()
    return Capture(
        url=f"http://127.0.0.1:9/page{n}", fetched_at=1_800_000_000.0 + n, status=200,
        reason="OK", payload=payload,
        response_headers=(("Content-Type", "text/plain"),),
    )


def test_a_partial_write_is_cut_back_and_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "warc"
    with tiny_tmpfs(root, 1024 * 1024):
        store = WarcStore(root, max_bytes=10**9, writer_name="full")
        kept = [store.write_response(capture(n)) for n in range(5)]
        open_path = root / (kept[0].file + OPEN_SUFFIX)
        filler = fill(root)
        with pytest.raises(StorageError) as refused:
            store.write_response(capture(99, size=200_000))
        assert refused.value.kind == DISK_FULL
        # Cut back at once: the file ends with its last complete record.
        assert complete_prefix(open_path) == open_path.stat().st_size
        filler.unlink()
        store.abandon()  # what a fault does: the file takes no more records
        later = store.write_response(capture(6))
        store.close()
        assert later.file != kept[0].file
        files = sorted(root.glob("*" + SUFFIX))
        check_files(files)
        for stored in [*kept, later]:
            record = read_record(root, stored.file, stored.offset, stored.length)
            check_digest(record, stored.file, stored.offset, stored.payload_digest)


async def test_a_deleted_directory_fails_the_sync_and_is_recreated(tmp_path: Path) -> None:
    root = tmp_path / "warc"
    durable = DurableStore(WarcStore(root, max_bytes=10**9, writer_name="gone"))
    await durable.run(lambda store: store.write_response(capture(1)))
    await durable.sync()
    os.rename(root, tmp_path / "moved")
    await durable.run(lambda store: store.write_response(capture(2)))
    with pytest.raises(StorageError) as lost:
        await durable.sync()
    assert lost.value.kind == DIRECTORY_GONE
    assert not durable.health.writable
    await durable.probe()  # recreates the directory and writes there
    assert root.is_dir() and durable.health.writable
    stored = await durable.run(lambda store: store.write_response(capture(3)))
    await durable.sync()
    assert (root / (stored.file + OPEN_SUFFIX)).exists()
    await durable.close()


async def test_concurrent_syncs_share_one_fsync(tmp_path: Path) -> None:
    durable = DurableStore(WarcStore(tmp_path, max_bytes=10**9, writer_name="group"))

    async def one(n: int) -> None:
        await durable.run(lambda store: store.write_response(capture(n)))
        await durable.sync()

    await asyncio.gather(*(one(n) for n in range(50)))
    assert 1 <= durable.syncs < 10, durable.syncs
    await durable.close()


def test_recovery_keeps_damage_that_complete_records_follow(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=10**9, writer_name="crashed")
    kept = [store.write_response(capture(n)) for n in range(6)]
    open_path = tmp_path / (kept[0].file + OPEN_SUFFIX)
    size = open_path.stat().st_size
    with open_path.open("r+b") as file:  # bytes flipped in the third record
        file.seek(kept[2].offset + kept[2].length // 2)
        file.write(b"\xff\x00\xff\x00")
    assert store._file is not None
    store._file.close()  # the writer dies without closing (its lock goes with it)
    restarted = WarcStore(tmp_path, max_bytes=10**9, writer_name="new")
    [recovered] = restarted.recovered
    assert recovered.damaged_at is not None and recovered.cut_bytes == 0
    closed = tmp_path / kept[0].file
    assert closed.stat().st_size == size, "no byte an index row points to was removed"
    for n, stored in enumerate(kept):
        if n == 2:
            with pytest.raises(RecordDamaged) as bad:
                record = read_record(tmp_path, stored.file, stored.offset, stored.length)
                check_digest(record, stored.file, stored.offset, stored.payload_digest)
            assert bad.value.kind in (CORRUPT, DIGEST)
            continue
        record = read_record(tmp_path, stored.file, stored.offset, stored.length)
        check_digest(record, stored.file, stored.offset, stored.payload_digest)


def test_reads_say_what_is_wrong(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=10**9, writer_name="r")
    first, second = store.write_response(capture(1)), store.write_response(capture(2))
    store.close()
    path = tmp_path / first.file
    os.truncate(path, second.offset + second.length // 2)
    with pytest.raises(RecordDamaged) as cut:
        read_record(tmp_path, second.file, second.offset, second.length)
    assert cut.value.kind == TRUNCATED and "truncated" in cut.value.message
    path.unlink()
    with pytest.raises(RecordDamaged) as gone:
        read_record(tmp_path, first.file, first.offset, first.length)
    assert gone.value.kind == MISSING and "missing" in gone.value.message
