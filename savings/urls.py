from django.urls import path

from . import views

urlpatterns = [
    path("savings/", views.savings, name="savings"),
    path("savings/<int:pk>/dismiss/", views.dismiss, name="savings-dismiss"),
    path("savings/idle-stop/", views.idle_stop_policy, name="savings-idle-stop"),
    path("savings/idle-stop/<int:pk>/", views.idle_stop_policy, name="savings-idle-stop-instance"),
]
