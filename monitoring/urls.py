"""Pages of the telemetry app (auto-included by console/urls.py)."""

from django.urls import path

from . import pages

urlpatterns = [
    path("hosts/<int:pk>/", pages.host_detail, name="host-detail"),
    path("gpus/<str:uuid>/", pages.gpu_detail, name="gpu-detail"),
    path("alerts/", pages.alert_list, name="alert-list"),
    path("alerts/<int:pk>/acknowledge/", pages.alert_acknowledge, name="alert-acknowledge"),
    path("monitoring/instances/<int:pk>/panel/", pages.instance_panel, name="instance-panel"),
    path("monitoring/instances/<int:pk>/precision/", pages.instance_precision, name="instance-precision"),
    path("monitoring/gpus/<str:uuid>/throttle/", pages.throttle, name="gpu-throttle"),
]
