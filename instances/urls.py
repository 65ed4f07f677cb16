from django.urls import path

from . import views

urlpatterns = [
    path("instances/", views.instance_list, name="instance-list"),
    path("instances/new/", views.launch, name="instance-launch"),
    path("instances/<int:pk>/", views.instance_detail, name="instance-detail"),
    path("instances/<int:pk>/<str:verb>/", views.instance_action, name="instance-action"),
    path("hosts/", views.host_list, name="host-list"),
    path("images/", views.image_list, name="image-list"),
    path("images/<int:pk>/retire/", views.image_retire, name="image-retire"),
]
