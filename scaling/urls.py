from django.urls import path

from . import views

urlpatterns = [
    path("scaling-groups/", views.group_list, name="scaling-group-list"),
    path("scaling-groups/<int:pk>/", views.group_detail, name="scaling-group-detail"),
]
