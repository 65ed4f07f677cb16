from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("", include("console.urls")),
    path("api/v1/", include("gpuconsole.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]

urlpatterns += [
    path("", include(module))
    for module in ("instances.urls", "monitoring.urls", "monitoring.metrics_urls", "billing.urls", "audit.urls",
                   "scaling.urls", "jobs.urls", "network.urls",
                   "savings.urls", "alerting.urls")
]

handler400 = "console.views.bad_request"
handler403 = "console.views.forbidden"
handler404 = "console.views.not_found"
