from django.urls import path

from . import views

urlpatterns = [
    path("jobs/", views.queue, name="job-queue"),
    path("jobs/<int:pk>/", views.job_detail, name="job-detail"),
    path("jobs/<int:pk>/cancel/", views.job_cancel, name="job-cancel"),
]
