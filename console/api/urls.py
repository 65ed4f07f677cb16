"""/api/v1/: each app's ``api.py`` lists ``routes`` (and may add ``urlpatterns``)."""

import importlib

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from . import views

APPS = ("console.api.routes", "instances.api", "monitoring.api", "billing.api", "audit.api")

router = DefaultRouter()
extra = []
for dotted in APPS:
    try:
        module = importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name != dotted:
            raise
        continue
    for prefix, viewset, basename in getattr(module, "routes", []):
        router.register(prefix, viewset, basename=basename)
    extra += getattr(module, "urlpatterns", [])

urlpatterns = [
    path("auth/token/", views.ObtainTokenView.as_view(), name="api-token"),
    *extra,
    path("", include(router.urls)),
]
