"""All websocket routes. Each app's ``routing.py`` owns its paths and its own guards
(agents: host token header; browsers: origin check + session)."""

import importlib

websocket_urlpatterns = []
for app in ("monitoring", "billing"):
    try:
        module = importlib.import_module(f"{app}.routing")
    except ModuleNotFoundError as exc:
        if exc.name != f"{app}.routing":
            raise
        continue
    websocket_urlpatterns += module.websocket_urlpatterns
