"""A witness keeps its own countersigned copy of the published heads: it signs each
head once, refuses a fork, and the console verifies against its copy too, so a tail
rewritten with the console's heads file deleted is still named."""

import json
import subprocess
import sys
from pathlib import Path

from audit_support import SIGNING_PEM, rewrite_tail
from django.utils import timezone

from audit import headlog, signing, treeheads, witness
from audit.verification import verify

ROOT = Path(__file__).resolve().parents[2]
LOG_PUBLIC = signing.public_pem(signing.load_private(SIGNING_PEM.encode()))


def run_witness(settings, tmp_path, *extra) -> int:
    key = tmp_path / "witness.pem"
    (tmp_path / "log.pem").write_text(LOG_PUBLIC)
    args = [settings.AUDIT_HEADS_FILE, "--log-key", str(tmp_path / "log.pem"), "--key", str(key)]
    return witness.main([*args, "--out", str(tmp_path / "witnessed.jsonl"), *extra])


def witnessed(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "witnessed.jsonl").read_text().splitlines()]


def test_each_head_is_countersigned_once(committed, settings, tmp_path, capsys):
    committed(3)
    committed(2)
    assert run_witness(settings, tmp_path) == 0
    assert run_witness(settings, tmp_path) == 0
    lines = witnessed(tmp_path)
    assert [line["tree_size"] for line in lines] == [3, 5]
    witness_public = signing.public_pem(signing.load_private((tmp_path / "witness.pem").read_bytes()))
    assert all(witness.verify_countersignature(line, witness_public) for line in lines)
    assert '"countersigned": 0' in capsys.readouterr().out.splitlines()[-1]


def test_a_fork_is_refused(committed, settings, tmp_path, capsys):
    committed(3)
    run_witness(settings, tmp_path)
    head = json.loads(Path(settings.AUDIT_HEADS_FILE).read_text())
    other = treeheads.sign_head(seq=3, head_hash=head["chain_hash"], frontier=[bytes(32)], time=timezone.now())
    headlog.append(settings.AUDIT_HEADS_FILE, other.as_dict())
    assert run_witness(settings, tmp_path) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("FORK: tree head #3")
    assert len(witnessed(tmp_path)) == 1


def test_a_head_not_signed_by_the_log_is_not_countersigned(committed, settings, tmp_path):
    committed(2)
    path = Path(settings.AUDIT_HEADS_FILE)
    head = json.loads(path.read_text())
    path.write_text(json.dumps(head | {"tree_size": 9}) + "\n")
    run_witness(settings, tmp_path)
    assert not (tmp_path / "witnessed.jsonl").exists()


def test_the_console_checks_the_witness_copy(committed, settings, tmp_path, tamper):
    committed(4)
    run_witness(settings, tmp_path)
    rewrite_tail(tamper, 4, "UPDATE audit_auditevent SET details = '{\"i\": 77}' WHERE seq = 4")
    Path(settings.AUDIT_HEADS_FILE).unlink()  # the console's own copy, gone with its host
    assert verify().valid  # nothing else pins the tail
    settings.AUDIT_WITNESS_FILE = str(tmp_path / "witnessed.jsonl")
    assert verify().reason.startswith("rewritten: the log's first 4 events")


def test_the_witness_needs_no_django():
    done = subprocess.run(
        [sys.executable, "-c", "import sys, audit.witness; assert not [m for m in sys.modules if m.startswith('django')]"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
