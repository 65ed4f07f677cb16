from .views import ApiTokenViewSet, MembershipViewSet, TeamViewSet

routes = [
    ("teams", TeamViewSet, "team"),
    ("members", MembershipViewSet, "membership"),
    ("auth/tokens", ApiTokenViewSet, "api-token-item"),
]
