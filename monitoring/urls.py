"""Pages of the telemetry app (auto-included by gpuconsole/urls.py)."""

from django.urls import path

from . import alert_pages, health_pages, pages, panels

urlpatterns = [
    path("hosts/<int:pk>/", pages.host_detail, name="host-detail"),
    path("hosts/<int:pk>/diagnostics/collect/", health_pages.host_collect, name="host-collect"),
    path("hosts/<int:pk>/placement/<str:verb>/", health_pages.host_placement, name="host-placement"),
    path("gpus/<str:uuid>/placement/<str:verb>/", health_pages.gpu_placement, name="gpu-placement"),
    path("gpus/<str:uuid>/", pages.gpu_detail, name="gpu-detail"),
    path("alerts/", pages.alert_list, name="alert-list"),
    path("alerts/<int:pk>/acknowledge/", pages.alert_acknowledge, name="alert-acknowledge"),
    path("alerts/<int:pk>/resolve/", alert_pages.alert_resolve, name="alert-resolve"),
    path("alerts/<int:pk>/silence/", alert_pages.alert_silence, name="alert-silence"),
    path("alerts/rules/", alert_pages.rule_list, name="alert-rules"),
    path("alerts/rules/<int:pk>/", alert_pages.rule_action, name="alert-rule-action"),
    path("alerts/channels/", alert_pages.channel_list, name="alert-channels"),
    path("alerts/channels/<int:pk>/", alert_pages.channel_action, name="alert-channel-action"),
    path("monitoring/instances/<int:pk>/panel/", pages.instance_panel, name="instance-panel"),
    path("monitoring/instances/<int:pk>/precision/", pages.instance_precision, name="instance-precision"),
    path("monitoring/instances/<int:pk>/figures/", panels.instance_figures, name="instance-figures"),
    path("monitoring/gpus/<str:uuid>/figures/", panels.gpu_figures, name="gpu-figures"),
]
