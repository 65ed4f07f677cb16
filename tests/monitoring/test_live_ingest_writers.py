"""Sample writes run on writer threads that keep their database connection between
writes (one connect per thread, not one per agent frame), and drop it after a failure."""

import pytest
from django.db import connection, connections

from monitoring.consumers import _write

pytestmark = pytest.mark.django_db(transaction=True)


def _connection_id() -> int:
    connection.ensure_connection()
    return id(connection.connection)


async def test_a_writer_thread_keeps_its_connection_between_writes(settings):
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django would close it after every call
    seen = {await _write(_connection_id)() for _ in range(20)}
    assert len(seen) <= len(_write.__globals__["_writers"]()._threads)


def _fail_after_connecting():
    connection.ensure_connection()
    raise RuntimeError("write failed")


async def test_a_failed_write_closes_the_connection(monkeypatch):
    closed = []
    wrapper = type(connections["default"])  # this backend's DatabaseWrapper
    original = wrapper.close
    monkeypatch.setattr(wrapper, "close", lambda self: closed.append(self.alias) or original(self))
    with pytest.raises(RuntimeError):
        await _write(_fail_after_connecting)()
    assert closed == ["default"]
    assert await _write(_connection_id)()  # and the next write connects again
