from django.urls import path

from . import views

urlpatterns = [
    path("audit/", views.events, name="audit-events"),
    path("audit/verify/", views.verify, name="audit-verify-page"),
    path("audit/<int:seq>/", views.event_detail, name="audit-event"),
]
