from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from . import sso, views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.logout_view, name="logout"),
    path("login/verify/", views.login_verify, name="login-verify"),
    path("login/enrol/", views.login_enrol, name="login-enrol"),
    path("account/", views.account, name="account"),
    path("account/two-factor/enrol/", views.account_enrol, name="account-enrol"),
    path("account/two-factor/", views.account_two_factor, name="account-two-factor"),
    path("account/sessions/end/", views.sign_out_everywhere, name="sign-out-everywhere"),
    path("users/<int:user_id>/reset-two-factor/", views.reset_two_factor, name="reset-two-factor"),
    path("account/tokens/", views.tokens, name="tokens"),
    path("team/", views.team_members, name="team-members"),
    path("invite/<str:key>/", views.accept_invite, name="accept-invite"),
    path("oidc/authenticate/", sso.AuthenticateView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", sso.CallbackView.as_view(), name="oidc_authentication_callback"),
    path("healthz", views.healthz, name="healthz"),
    path("api/v1/", include("console.api.urls")),
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
