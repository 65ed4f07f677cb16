"""The offline verifier does not trust its input's size: a zip bomb, a manifest nested
100,000 deep, an endless line or garbage each answer "INVALID: …" with exit code 2, in
a few MiB of memory whatever the file claims to hold."""

import tracemalloc
import zipfile
import zlib

import pytest

from audit import offline_verify

MiB = 1 << 20


def peak_of(argv) -> tuple[int, int]:
    """(exit code, peak bytes allocated by Python while verifying)."""
    tracemalloc.start()
    try:
        code = offline_verify.main(argv)
        return code, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bomb(path, member: str, expanded: int, other=("manifest.json", b'{"type":"manifest"}')):
    """A zip whose ``member`` is ``expanded`` zero bytes (~1,000 times smaller packed)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as bundle:
        bundle.writestr(other[0], other[1])
        with bundle.open(member, "w", force_zip64=True) as out:
            chunk = bytes(MiB)
            for _ in range(expanded // MiB):
                out.write(chunk)
    return path


@pytest.fixture(scope="module")
def events_bomb(tmp_path_factory):
    return bomb(tmp_path_factory.mktemp("bomb") / "bomb.zip", "events.csv", 400 * MiB)


def test_a_zip_bomb_is_refused_before_it_expands(events_bomb, capsys):
    assert events_bomb.stat().st_size < 1 * MiB  # 400 MiB packed in well under 1 MiB
    code, peak = peak_of([str(events_bomb)])
    out = capsys.readouterr().out
    assert code == 2 and out.startswith("INVALID: ") and "zip bomb" in out
    assert peak < 8 * MiB


def test_a_manifest_bomb_is_refused(tmp_path, capsys):
    path = bomb(tmp_path / "m.zip", "manifest.json", 200 * MiB, other=("events.csv", b""))
    code, peak = peak_of([str(path)])
    assert code == 2 and "manifest.json expands to" in capsys.readouterr().out
    assert peak < 8 * MiB


def test_past_the_ratio_a_member_is_read_a_bounded_line_at_a_time(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(offline_verify, "MAX_RATIO", 10**9)  # past the ratio: read as streamed
    path = bomb(tmp_path / "b.zip", "events.csv", 64 * MiB)
    code, peak = peak_of([str(path)])
    assert code == 2 and capsys.readouterr().out.startswith("INVALID: ")
    assert peak < 16 * MiB  # one bounded line at a time, never the member


def test_a_manifest_nested_100000_deep_is_refused(tmp_path, capsys):
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    code, _ = peak_of([str(path)])
    out = capsys.readouterr().out
    assert code == 2 and "nested deeper than 64 levels" in out


def test_a_deep_manifest_inside_a_zip_is_refused(tmp_path, capsys):
    path = tmp_path / "deep.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as bundle:
        bundle.writestr("manifest.json", b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
        bundle.writestr("events.csv", b"")
    assert offline_verify.main([str(path)]) == 2
    assert "nested deeper" in capsys.readouterr().out


def test_brackets_inside_strings_do_not_count(tmp_path):
    assert offline_verify.loads(b'{"a": "' + b"[" * 1000 + b'\\" ]"}', "x") == {"a": "[" * 1000 + '" ]'}


def test_an_endless_line_is_refused_at_the_line_limit(tmp_path, capsys):
    path = tmp_path / "long.jsonl"
    with path.open("wb") as out:
        out.write(b'{"type":"manifest","complete":false,"records":[],"count":0}\n')
        for _ in range(64):
            out.write(b"x" * MiB)
    code, peak = peak_of([str(path)])
    assert code == 2 and "longer than 4 MiB" in capsys.readouterr().out
    assert peak < 16 * MiB


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00\xff garbage", b'"just a string"\n', b"[1, 2]\n", b'{"type": "manifest"}\n{"type": [[[[\n'],
)
def test_garbage_answers_invalid_with_exit_2(tmp_path, capsys, content):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    assert offline_verify.main([str(path)]) == 2
    assert capsys.readouterr().out.startswith("INVALID: ")


def test_a_corrupt_zip_answers_invalid_with_exit_2(tmp_path, capsys):
    path = tmp_path / "c.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("manifest.json", b'{"type":"manifest"}')
        bundle.writestr("events.csv", b"seq\n" * 1000)
    data = bytearray(path.read_bytes())
    at = data.find(zlib.compress(b"seq\n" * 1000)[2:12])
    data[at + 4 : at + 8] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(data))
    assert offline_verify.main([str(path)]) == 2
    assert capsys.readouterr().out.startswith("INVALID: ")
