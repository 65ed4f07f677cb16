from django.contrib.auth import authenticate
from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from console import lockout, services, twofactor
from console.models import ApiToken, Membership, Team
from console.policy import may
from console.validators import whole_number

from .mixins import TeamScopedViewSetMixin
from .serializers import (
    ApiTokenSerializer,
    LoginSerializer,
    MembershipSerializer,
    NewApiTokenSerializer,
    RoleChangeSerializer,
    TeamSerializer,
    TokenRequestSerializer,
)


class ObtainTokenView(APIView):
    """Exchange a username and password for a personal API token (shown once)."""

    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "login"

    @extend_schema(request=LoginSerializer, responses={201: NewApiTokenSerializer})
    def post(self, request):
        form = LoginSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        # The HttpRequest, not DRF's wrapper: django-axes marks a lockout on it.
        user = authenticate(request._request, username=data["username"], password=data["password"])
        if user is None and getattr(request._request, "axes_locked_out", False):
            return Response({"detail": lockout.message(), "code": "locked_out"}, status=429)
        if user is None:
            services.record_login(user=None, success=False, username=data["username"], via="api")
            return Response({"detail": "Wrong username or password."}, status=status.HTTP_400_BAD_REQUEST)
        refusal = second_factor_refusal(user, data["otp"])
        if refusal is not None:
            return refusal
        with transaction.atomic():
            services.record_login(user=user, success=True, via="api")
            token, raw = services.create_api_token(
                actor=user, user=user, name=data["name"], scopes=data["scopes"], second_factor=twofactor.enrolled(user)
            )
        body = NewApiTokenSerializer(token).data | {"token": raw}
        return Response(body, status=status.HTTP_201_CREATED)


def second_factor_refusal(user, code: str) -> Response | None:
    """Where the user has (or must have) a second factor, the password alone gets no token."""
    if twofactor.enrolled(user):
        if not code:
            return Response({"otp": ["A two-factor code is required for this account."]}, status=status.HTTP_400_BAD_REQUEST)
        if twofactor.verify(user=user, code=code, via="api") is None:
            return Response({"otp": ["Wrong or already used code."]}, status=status.HTTP_400_BAD_REQUEST)
    elif twofactor.required_for(user):
        return Response(
            {"detail": "Your role requires two-factor sign-in: enrol on your account page in the browser first."},
            status=status.HTTP_403_FORBIDDEN,
        )
    return None


class ApiTokenViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Your own API tokens. POST makes one with ``scopes`` (read, write, audit:export),
    optional ``teams`` and ``expires_at``; the key is in that answer only. Revoke one
    with POST …/{id}/revoke/."""

    serializer_class = ApiTokenSerializer
    queryset = ApiToken.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user).prefetch_related("teams")

    @extend_schema(request=TokenRequestSerializer, responses={201: NewApiTokenSerializer})
    def create(self, request):
        form = TokenRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        parent = request.auth if isinstance(request.auth, ApiToken) else None
        token, raw = services.create_api_token(
            actor=request.user, user=request.user, name=data["name"], scopes=data["scopes"],
            teams=data.get("teams", []), expires_at=data.get("expires_at"), parent=parent,
            second_factor=twofactor.request_second_factor(request),
        )
        return Response(NewApiTokenSerializer(token).data | {"token": raw}, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        token = self.get_object()
        if token.revoked_at is None:
            services.revoke_api_token(actor=request.user, token=token)
        return Response(ApiTokenSerializer(token).data)


class TeamViewSet(
    TeamScopedViewSetMixin, mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Teams you belong to (operators: all). Operators create teams."""

    queryset = Team.objects.all()
    serializer_class = TeamSerializer
    filterset_fields = ["name", "slug"]
    ordering_fields = ["name", "created_at"]

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if self.request.user.is_authenticated:
            context["roles"] = dict(
                Membership.objects.filter(user=self.request.user).values_list("team_id", "role")
            )
        return context

    def perform_create(self, serializer):
        if not may(self.request.user, "accounts.manage"):
            self.permission_denied(self.request, message="Only operators can create teams.")
        serializer.instance = services.create_team(actor=self.request.user, name=serializer.validated_data["name"])


class MembershipViewSet(TeamScopedViewSetMixin, viewsets.ModelViewSet):
    """Members of your teams. Team admins add, change and remove them."""

    queryset = Membership.objects.select_related("user", "team")
    serializer_class = MembershipSerializer
    filterset_fields = ["team", "role"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def create(self, request, *args, **kwargs):
        team_id = whole_number(str(request.data.get("team", ""))) if isinstance(request.data, dict) else None
        if team_id is not None and Team.objects.for_user(request.user).filter(pk=team_id).exists():
            self.require("team.admin", team_id, "manage members")
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer):
        team = serializer.validated_data["team"]
        self.require("team.admin", team, "manage members")
        serializer.instance = services.add_member(
            actor=self.request.user, team=team, user=serializer.validated_data["user"], role=serializer.validated_data["role"]
        )

    @extend_schema(request=RoleChangeSerializer, responses=MembershipSerializer)
    def partial_update(self, request, *args, **kwargs):
        membership = self.get_object()
        self.require("team.admin", membership, "manage members")
        form = RoleChangeSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        services.change_role(actor=request.user, membership=membership, role=form.validated_data["role"])
        return Response(MembershipSerializer(membership).data)

    def perform_destroy(self, membership):
        self.require("team.admin", membership, "manage members")
        services.remove_member(actor=self.request.user, membership=membership)
