"""Telemetry fixtures: host tokens, agents, the recorded trace."""

import json

import pytest
from telemetry_wire import TRACE, Agent

from monitoring import services


@pytest.fixture(scope="session", autouse=True)
def _close_thread_connections(django_db_setup):
    """Consumers query from worker threads whose connections outlive a test; close
    them before the test database is dropped."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    from monitoring.consumers import close_writer_connections

    close_writer_connections()
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # The shared user fixtures hash a password; PBKDF2 would dominate these tests' time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def tokens(ops, fleet):
    """{host name: raw host token} for every host of the fleet."""
    return {
        host.name: services.create_host_token(actor=ops, host=host)[1] for host in fleet["hosts"].values()
    }


@pytest.fixture
def agent():
    return Agent


@pytest.fixture
def trace_lines():
    if not TRACE.exists():
        pytest.skip(f"recorded trace not found at {TRACE}")
    lines = [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]
    return lines[0], lines[1:]




@pytest.fixture
def agent_ingest(ops):
    """Store one metrics record for ``gpu`` at ``when`` through the ingest service."""
    import secrets

    from monitoring import ingest
    from monitoring.frames import Metrics, Record, Samples

    def send(gpu, when, **m):
        batch = Samples(boot_id=secrets.token_hex(16), records=[Record(seq=1, t=when.timestamp(), gpu=gpu.uuid, slice=None, m=Metrics(**m))])
        return ingest.store(link=ingest.Link(gpu.host_id, gpu.host.name), batches=[batch])

    return send


@pytest.fixture
def agent_ingest_event():
    """Store one event record for ``gpu`` through the ingest service."""
    import itertools
    import time

    from monitoring import ingest
    from monitoring.frames import Event, Record, Samples

    seqs = itertools.count(1)

    def send(gpu, kind, **event):
        record = Record(seq=next(seqs), t=time.time(), gpu=gpu.uuid, slice=None, event=Event(kind=kind, **event))
        return ingest.store(link=ingest.Link(gpu.host_id, gpu.host.name),
                            batches=[Samples(boot_id="cd" * 16, records=[record])])

    return send
