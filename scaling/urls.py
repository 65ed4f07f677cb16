from django.urls import path

from . import views

urlpatterns = [
    path("scaling-groups/", views.group_list, name="scaling-group-list"),
    path("scaling-groups/new/", views.group_create, name="scaling-group-create"),
    path("scaling-groups/<int:pk>/", views.group_detail, name="scaling-group-detail"),
    path("scaling-groups/<int:pk>/edit/", views.group_edit, name="scaling-group-edit"),
    path("scaling-groups/<int:pk>/delete/", views.group_delete, name="scaling-group-delete"),
]
