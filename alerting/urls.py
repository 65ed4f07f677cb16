"""Alert pages (auto-included by console/urls.py); the paths and names are the ones the
pages always had."""

from django.urls import path

from . import views

urlpatterns = [
    path("alerts/", views.alert_list, name="alert-list"),
    path("alerts/<int:pk>/acknowledge/", views.alert_acknowledge, name="alert-acknowledge"),
    path("alerts/<int:pk>/resolve/", views.alert_resolve, name="alert-resolve"),
    path("alerts/<int:pk>/silence/", views.alert_silence, name="alert-silence"),
    path("alerts/rules/", views.rule_list, name="alert-rules"),
    path("alerts/rules/<int:pk>/", views.rule_action, name="alert-rule-action"),
    path("alerts/channels/", views.channel_list, name="alert-channels"),
    path("alerts/channels/<int:pk>/", views.channel_action, name="alert-channel-action"),
]
