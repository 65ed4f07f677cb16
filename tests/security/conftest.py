"""Security suite fixtures: raw websocket clients for agents and browsers."""

import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

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


def application():
    from gpuconsole.asgi import application

    return application


@pytest.fixture
def host_token(ops, fleet):
    return services.create_host_token(actor=ops, host=fleet["hosts"]["h100-a"])[1]


def _cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


class Socket:
    """One websocket through the whole ASGI application (routing included)."""

    def __init__(self, path, headers):
        self.ws = WebsocketCommunicator(application(), path, headers=headers)

    async def open(self):
        return await self.ws.connect()

    async def send(self, frame):
        if isinstance(frame, bytes):
            await self.ws.send_to(bytes_data=frame)
        else:
            await self.ws.send_to(text_data=frame if isinstance(frame, str) else json.dumps(frame))

    async def closed(self, timeout=5) -> tuple[int, list[dict]]:
        """The close code the server sent, and the frames it sent before it."""
        frames = []
        while True:
            out = await self.ws.receive_output(timeout=timeout)
            if out["type"] == "websocket.close":
                return out.get("code", 1000), frames
            frames.append(json.loads(out["text"]))

    async def recv(self, timeout=5) -> dict:
        return json.loads(await self.ws.receive_from(timeout=timeout))

    async def disconnect(self):
        await self.ws.disconnect()


@pytest.fixture
def agent_socket():
    def make(token, path="/ws/agent/"):
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        return Socket(path, headers)

    return make


@pytest.fixture
def live_socket():
    async def make(user, path="/ws/live/"):
        headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
        if user is not None:
            headers.append((b"cookie", await sync_to_async(_cookie)(user)))
        return Socket(path, headers)

    return make
