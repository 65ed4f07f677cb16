"""Pages of the telemetry app (auto-included by gpuconsole/urls.py)."""

from django.urls import path

from . import health_pages, pages, panels

urlpatterns = [
    path("hosts/<int:pk>/", pages.host_detail, name="host-detail"),
    path("hosts/<int:pk>/diagnostics/collect/", health_pages.host_collect, name="host-collect"),
    path("hosts/<int:pk>/placement/<str:verb>/", health_pages.host_placement, name="host-placement"),
    path("gpus/<str:uuid>/placement/<str:verb>/", health_pages.gpu_placement, name="gpu-placement"),
    path("gpus/<str:uuid>/", pages.gpu_detail, name="gpu-detail"),
    path("monitoring/instances/<int:pk>/panel/", panels.instance_panel, name="instance-panel"),
    path("monitoring/instances/<int:pk>/precision/", pages.instance_precision, name="instance-precision"),
    path("monitoring/instances/<int:pk>/figures/", panels.instance_figures, name="instance-figures"),
    path("monitoring/gpus/<str:uuid>/figures/", panels.gpu_figures, name="gpu-figures"),
]
