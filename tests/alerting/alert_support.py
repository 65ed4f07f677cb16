"""Helpers for alert tests: readings through the ingest service over one connection."""

from __future__ import annotations

import itertools
import time

from alerting.models import ACTIVE_STATES, Alert
from monitoring import ingest
from monitoring.frames import Event, Metrics, Record, Samples


class Feed:
    """One agent connection of ``host``: readings go through ingest.store, as the
    websocket consumer stores them, so ingest-time rules see them."""

    def __init__(self, host):
        self.link = ingest.Link(host.pk, host.name)
        self.seqs = itertools.count(1)
        self.boot = "ef" * 16

    def readings(self, gpu, start: float, values: list[dict], step: float = 1.0) -> None:
        records = [Record(seq=next(self.seqs), t=start + i * step, gpu=gpu.uuid, slice=None, m=Metrics(**m))
                   for i, m in enumerate(values)]
        ingest.store(link=self.link, batches=[Samples(boot_id=self.boot, records=records)])

    def event(self, gpu, t: float, **event) -> None:
        record = Record(seq=next(self.seqs), t=t, gpu=gpu.uuid, slice=None, event=Event(**event))
        ingest.store(link=self.link, batches=[Samples(boot_id=self.boot, records=[record])])


def active(**filters) -> list[Alert]:
    return list(Alert.objects.filter(state__in=ACTIVE_STATES, **filters).order_by("id"))


def now() -> float:
    return time.time()


class Receiver:
    """A local HTTP endpoint that records each POST and answers with ``statuses``
    in turn (then 200)."""

    def __init__(self, statuses=()):
        import http.server
        import threading

        self.posts: list[tuple[dict, bytes]] = []
        self.statuses = list(statuses)
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.posts.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else 200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
