from django.urls import path

from . import views

urlpatterns = [
    path("savings/", views.savings, name="savings"),
    path("savings/<int:pk>/dismiss/", views.dismiss, name="savings-dismiss"),
]
