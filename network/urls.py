from django.urls import path

from . import views

urlpatterns = [
    path("networks/", views.vpc_list, name="vpc-list"),
    path("networks/<int:pk>/", views.vpc_detail, name="vpc-detail"),
    path("security-groups/", views.group_list, name="security-group-list"),
    path("security-groups/<int:pk>/", views.group_detail, name="security-group-detail"),
    path("security-groups/<int:pk>/rules/<int:rule_id>/remove/", views.rule_remove, name="security-rule-remove"),
    path("network-interfaces/<int:pk>/groups/", views.instance_groups, name="interface-groups"),
]
