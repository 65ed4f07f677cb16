"""A websocket app served by a real daphne in tests: it answers each message with its
size, or, for "hold", stops reading its messages (a busy consumer)."""

import asyncio
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")
django.setup()

from gpuconsole import serving  # noqa: E402

serving.install()


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        return
    assert scope["type"] == "websocket"
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text") or ""
        if text == "hold":
            await asyncio.sleep(3600)
        await send({"type": "websocket.send", "text": str(len(text))})
