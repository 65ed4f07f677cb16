"""Verify an exported audit file without the database:

    AUDIT_SIGNING_KEY=… python -m audit.offline_verify audit-events-through-1234.jsonl

Checks that every event's hash matches its content and previous hash, that consecutive
events link, that the file is complete (its end line's count), and that the signed
checkpoint at its end is genuine (with the key) and matches the last event. Needs only
the Python standard library and ``audit/chain.py``. Exit code 0 when all checks pass.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from audit import chain

_TEXT = ("actor_id", "actor_name", "action", "target_type", "target_id", "user_agent", "request_id")


@dataclass
class Result:
    events: int = 0
    links_checked: int = 0
    links_unchecked: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    last_hash: str | None = None
    checkpoint: dict | None = None
    declared_count: int | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)

    @property
    def ok(self) -> bool:
        return not self.problems


def _csv_records(handle) -> Iterator[dict]:
    reader = csv.reader(handle)
    columns = next(reader, None)
    if columns is None or tuple(columns) != (*chain.FIELDS, "prev_hash", "hash"):
        raise ValueError("not an audit CSV export (unexpected header row)")
    for cells in reader:
        if cells and cells[0] == "#checkpoint":
            seq, hash_, time, key_id, signature = cells[1:6]
            yield {
                "type": "checkpoint",
                "seq": int(seq),
                "hash": hash_,
                "time": time,
                "key_id": key_id,
                "signature": signature,
            }
        elif cells and cells[0] == "#end":
            yield {"type": "end", "count": int(cells[1]), "through_seq": int(cells[2])}
        else:
            row = dict(zip(columns, cells, strict=True))
            for name in _TEXT:
                row[name] = chain.csv_uncell(row[name])
            row["seq"] = int(row["seq"])
            row["team_id"] = int(row["team_id"]) if row["team_id"] else None
            row["source_ip"] = row["source_ip"] or None
            row["details"] = json.loads(row["details"])
            row["type"] = "event"
            yield row


def _jsonl_records(handle) -> Iterator[dict]:
    for number, line in enumerate(handle, 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {number} is not JSON: {exc}") from None


def records(path: str) -> Iterator[dict]:
    with open(path, encoding="utf-8", newline="") as handle:
        first = handle.read(1)
        handle.seek(0)
        yield from (_jsonl_records(handle) if first == "{" else _csv_records(handle))


def verify_file(path: str, key: str | None) -> Result:
    result = Result()
    prev: tuple[int, str] | None = None
    for record in records(path):
        kind = record.get("type")
        if kind == "event":
            _check_event(result, record, prev)
            prev = (record["seq"], record["hash"])
        elif kind == "checkpoint":
            result.checkpoint = record
        elif kind == "end":
            result.declared_count = record["count"]
    _check_ending(result, key)
    return result


def _check_event(result: Result, row: dict, prev: tuple[int, str] | None) -> None:
    result.events += 1
    seq = row["seq"]
    result.first_seq = seq if result.first_seq is None else result.first_seq
    result.last_seq, result.last_hash = seq, row["hash"]
    if chain.row_hash(row, row["prev_hash"]) != row["hash"]:
        result.problem(f"#{seq}: hash mismatch (the record was edited)")
    if prev is None:
        return
    if prev[0] + 1 == seq:
        result.links_checked += 1
        if row["prev_hash"] != prev[1]:
            result.problem(f"#{seq}: does not follow #{prev[0]} (broken link)")
    elif seq <= prev[0]:
        result.problem(f"#{seq}: out of order after #{prev[0]}")
    else:
        result.links_unchecked += 1


def _check_ending(result: Result, key: str | None) -> None:
    if result.declared_count is None:
        result.problem("no end line: the file is truncated")
    elif result.declared_count != result.events:
        result.problem(
            f"the file holds {result.events} events but says {result.declared_count}: truncated or padded"
        )
    cp = result.checkpoint
    if cp is None:
        result.notes.append("no checkpoint in the file: the events are not tied to a signature")
        return
    if key:
        if not chain.signature_ok(key, cp["seq"], cp["hash"], cp["time"], cp["signature"]):
            result.problem(
                f"checkpoint #{cp['seq']}: bad signature (forged, or another key: file key id {cp['key_id']}, yours {chain.key_id(key)})"
            )
    else:
        result.notes.append("checkpoint signature not checked: set AUDIT_SIGNING_KEY to check it")
    if result.last_seq == cp["seq"]:
        if result.last_hash != cp["hash"]:
            result.problem(
                f"#{cp['seq']}: hash differs from the signed checkpoint (the chain was rewritten)"
            )
    elif result.events:
        result.notes.append(
            f"the last event (#{result.last_seq}) is not the checkpoint's (#{cp['seq']}): a filtered export "
            "proves each event's own hash, not its place in the whole chain"
        )
    if result.links_unchecked:
        result.notes.append(
            f"{result.links_unchecked} gaps between exported events (filtered export): links not checkable"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Verify an exported GPU Console audit file (JSONL or CSV)."
    )
    parser.add_argument("path")
    args = parser.parse_args(argv)
    try:
        result = verify_file(args.path, os.environ.get("AUDIT_SIGNING_KEY"))
    except (OSError, ValueError, KeyError) as exc:
        print(f"INVALID: cannot read {args.path}: {exc}")
        return 2
    span = f"#{result.first_seq}..#{result.last_seq}" if result.events else "no events"
    for note in result.notes:
        print(f"note: {note}")
    for problem in result.problems:
        print(f"INVALID {problem}")
    verdict = "valid" if result.ok else "INVALID"
    cp = f", checkpoint #{result.checkpoint['seq']}" if result.checkpoint else ""
    print(
        f"summary: {verdict}: {result.events} events ({span}), {result.links_checked} links checked{cp}"
    )
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
