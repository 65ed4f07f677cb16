"""/api/v1/: each app's ``api.py`` lists ``routes`` (and may add ``urlpatterns``)."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from alerting import api as alerting_api
from audit import api as audit_api
from billing import api as billing_api
from console.api import routes, views
from instances import api as instances_api
from jobs import api as jobs_api
from monitoring import api as monitoring_api
from network import api as network_api
from savings import api as savings_api
from scaling import api as scaling_api

router = DefaultRouter()
extra = []
for module in (routes, instances_api, monitoring_api, billing_api, audit_api, scaling_api, jobs_api, network_api,
               savings_api, alerting_api):
    for prefix, viewset, basename in module.routes:
        router.register(prefix, viewset, basename=basename)
    extra += getattr(module, "urlpatterns", [])

urlpatterns = [
    path("auth/token/", views.ObtainTokenView.as_view(), name="api-token"),
    *extra,
    # The viewsets' route names (instance-list, host-detail, …) are also the pages' names;
    # a namespace keeps the API root's links on the API.
    path("", include((router.urls, "api"))),
]
