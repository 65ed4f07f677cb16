"""Operator endpoints of the telemetry app (auto-included by gpuconsole/urls.py)."""

from django.urls import path

from . import operators

urlpatterns = [
    path("metrics", operators.metrics, name="metrics"),
    path("hosts/<int:pk>/tokens/", operators.host_tokens, name="host-tokens"),
]
