import json

import pytest

from agent.protocol import MAX_FRAME_BYTES
from agent.spool import Spool, SpoolError

BOOT_A, BOOT_B = "a" * 32, "b" * 32


def rows(first: int, last: int, pad: str = "") -> list[tuple[int, str]]:
    return [(seq, json.dumps({"seq": seq, "pad": pad})) for seq in range(first, last + 1)]


def seqs(batch) -> list[int]:
    return [r["seq"] for r in json.loads(batch.text)["records"]]


def test_it_gives_back_the_oldest_records_first(tmp_path):
    spool = Spool(tmp_path, max_records=1000)
    spool.append(BOOT_A, rows(1, 5))
    spool.append(BOOT_A, rows(6, 8))
    assert seqs(spool.oldest_batch()) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_full_spool_drops_the_oldest_and_counts_them(tmp_path):
    spool = Spool(tmp_path, max_records=10)
    spool.append(BOOT_A, rows(1, 8))
    assert spool.append(BOOT_A, rows(9, 14)) == 4
    assert len(spool) == 10 and spool.dropped_total == 4
    assert seqs(spool.oldest_batch())[0] == 5


def test_records_survive_a_restart(tmp_path):
    spool = Spool(tmp_path)
    spool.append(BOOT_A, rows(1, 3))
    spool.close()
    again = Spool(tmp_path)
    assert len(again) == 3
    assert seqs(again.oldest_batch()) == [1, 2, 3]


def test_an_ack_forgets_records_up_to_its_seq_for_its_boot_only(tmp_path):
    spool = Spool(tmp_path)
    spool.append(BOOT_A, rows(1, 4))
    spool.append(BOOT_B, rows(1, 4))
    assert spool.ack(BOOT_A, 3) == 3
    batch = spool.oldest_batch()
    assert (batch.boot_id, seqs(batch)) == (BOOT_A, [4])


def test_a_batch_never_mixes_boot_ids(tmp_path):
    spool = Spool(tmp_path)
    spool.append(BOOT_A, rows(7, 9))
    spool.append(BOOT_B, rows(1, 2))
    first = spool.oldest_batch()
    spool.ack(first.boot_id, first.last_seq)
    second = spool.oldest_batch()
    assert (first.boot_id, seqs(first)) == (BOOT_A, [7, 8, 9])
    assert (second.boot_id, seqs(second)) == (BOOT_B, [1, 2])


def test_a_batch_holds_at_most_500_records(tmp_path):
    spool = Spool(tmp_path, max_records=2000)
    spool.append(BOOT_A, rows(1, 1200))
    assert spool.oldest_batch().count == 500


def test_a_batch_fits_in_512_kib(tmp_path):
    spool = Spool(tmp_path)
    spool.append(BOOT_A, rows(1, 300, pad="x" * 4000))
    batch = spool.oldest_batch()
    assert len(batch.text.encode()) <= MAX_FRAME_BYTES
    assert 100 < batch.count < 300


def test_dropping_a_batch_removes_only_that_batch(tmp_path):
    spool = Spool(tmp_path, max_records=2000)
    spool.append(BOOT_A, rows(1, 700))
    spool.drop(spool.oldest_batch())
    assert seqs(spool.oldest_batch())[0] == 501 and len(spool) == 200


def test_two_agents_cannot_share_a_spool(tmp_path):
    first = Spool(tmp_path)
    with pytest.raises(SpoolError, match="in use by another gpuconsole-agent"):
        Spool(tmp_path)
    first.close()


async def test_records_wait_in_memory_while_the_spool_cannot_be_written(tmp_path, monkeypatch):
    import asyncio

    from agent import uplink
    from agent.uplink import HostLink

    monkeypatch.setattr(uplink, "SPOOL_AFTER_S", 0.0)
    spool = Spool(tmp_path)
    link = HostLink(server="ws://127.0.0.1:9/", host="h", token="t", gpus=[], backend="sim",
                    spool=spool)  # fmt: skip
    link.bind(asyncio.get_running_loop())
    real_append = spool.append
    monkeypatch.setattr(spool, "append", lambda *a: (_ for _ in ()).throw(OSError(28, "full")))
    flusher = asyncio.create_task(link._flush_loop())
    link.outbox.put([{"t": 1.0, "gpu": "GPU-a", "m": {"gpu_util": 1}}])
    for _ in range(100):
        await asyncio.sleep(0.01)
        if link.in_memory and link._writing is None:
            break
    assert link.in_memory == 1 and len(spool) == 0
    monkeypatch.setattr(spool, "append", real_append)
    for _ in range(300):
        await asyncio.sleep(0.01)
        if len(spool):
            break
    flusher.cancel()
    assert link.in_memory == 0 and len(spool) == 1


def test_the_file_is_made_only_when_something_is_spooled(tmp_path):
    spool = Spool(tmp_path)
    assert len(spool) == 0 and spool.oldest_batch() is None and spool.ack(BOOT_A, 5) == 0
    assert not (tmp_path / "spool.sqlite3").exists()
    spool.append(BOOT_A, rows(1, 2))
    assert (tmp_path / "spool.sqlite3").exists() and len(spool) == 2
