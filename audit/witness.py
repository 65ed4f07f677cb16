"""A witness: a second process, ideally on another host, that keeps its own copy of the
console's published tree heads and countersigns each one, so that rewriting the log
needs the database, the console's heads file and the witness's file at once. No Django.

    python -m audit.witness var/audit-heads.jsonl --log-key audit.pem \
        --key witness.pem --out witnessed.jsonl --follow

Each head of the console's file (the file shipped or mounted here) is checked: signed by
the log's public key, and no other root already witnessed for the same size (a fork:
the log showed two histories). A good head is appended to ``--out`` with the witness's
fingerprint and Ed25519 signature over the same signed text, and fsynced; a fork is
reported and nothing more is signed. ``--follow`` keeps reading as the file grows. The
console verifies against the witness's copy too when ``AUDIT_WITNESS_FILE`` names it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from audit import headlog, signing

PREFIX = b"gpuconsole-audit-witness:v1\n"


class Fork(Exception):
    pass


class Witness:
    def __init__(self, log_key_pem: str, private_pem: bytes, out: str | Path):
        self.log_key = signing.load_public(log_key_pem)
        self.private = signing.load_private(private_pem)
        self.fingerprint = signing.fingerprint(self.private.public_key())
        self.out = Path(out)
        self.roots: dict[int, str] = {}
        for _, head in headlog.read(self.out, extra=True):
            if not isinstance(head, headlog.BadLine):
                self.roots[head["tree_size"]] = head["root"]

    def take(self, head: dict) -> bool:
        """Countersign ``head`` if it is new and sound; False when already witnessed or
        not signed by the log's key; Fork when it contradicts a witnessed head."""
        size, root = head["tree_size"], head["root"]
        if not signing.verify(self.log_key, headlog.message(head), head["signature"]):
            return False
        known = self.roots.get(size)
        if known == root:
            return False
        if known is not None:
            raise Fork(f"tree head #{size}: root {root} published, {known} witnessed before")
        signature = signing.sign(self.private, PREFIX + headlog.message(head))
        headlog.append(self.out, head, extra={"witness": self.fingerprint, "witness_signature": signature})
        self.roots[size] = root
        return True

    def run(self, heads_file: str, *, follow: bool = False, interval: float = 1.0) -> int:
        """Witness the file's heads (and, following, those appended later); the number
        countersigned."""
        signed, offset = 0, 0
        while True:
            offset, heads = _new_heads(heads_file, offset)
            for head in heads:
                signed += self.take(head)
            if not follow:
                return signed
            time.sleep(interval)


def _new_heads(path: str, offset: int) -> tuple[int, list[dict]]:
    """The whole lines appended to ``path`` since ``offset``, as heads."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return offset, []
    end = data.rfind(b"\n") + 1
    heads = []
    for number, line in enumerate(data[:end].splitlines(), 1):
        try:
            heads.append(headlog.parse(line, number))
        except headlog.BadLine:
            continue
    return offset + end, heads


def verify_countersignature(line: dict, witness_pem: str) -> bool:
    return signing.verify(witness_pem, PREFIX + headlog.message(line), line.get("witness_signature", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Countersign a GPU Console's published audit tree heads.")
    parser.add_argument("heads", help="the console's heads file (AUDIT_HEADS_FILE), shipped or mounted here")
    parser.add_argument("--log-key", required=True, help="the console's audit public key (PEM)")
    parser.add_argument("--key", required=True, help="the witness's Ed25519 private key (PEM; made if absent)")
    parser.add_argument("--out", required=True, help="the witness's own append-only copy")
    parser.add_argument("--follow", action="store_true", help="keep reading as the file grows")
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    key = Path(args.key)
    if not key.exists():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(signing.new_private_pem())
    witness = Witness(Path(args.log_key).read_text(), key.read_bytes(), args.out)
    try:
        signed = witness.run(args.heads, follow=args.follow, interval=args.interval)
    except Fork as exc:
        print(f"FORK: {exc}")
        return 1
    print(json.dumps({"countersigned": signed, "witness": witness.fingerprint}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
