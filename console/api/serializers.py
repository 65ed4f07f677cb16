from django.contrib.auth.models import User
from rest_framework import serializers

from console.api.fields import BoundedDateTimeField
from console.models import ApiToken, Membership, Role, Scope, Team
from console.validators import no_control_characters, plain_name


class TeamSerializer(serializers.ModelSerializer):
    name = serializers.CharField(max_length=80, validators=[plain_name])
    my_role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["id", "name", "slug", "created_at", "my_role"]
        read_only_fields = ["slug", "created_at"]

    def get_my_role(self, team) -> str | None:
        roles = self.context.get("roles") or {}
        return roles.get(team.pk)

    def validate_name(self, value):
        if Team.objects.filter(name__iexact=value).exists():
            raise serializers.ValidationError("A team with this name exists.")
        return value


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.SlugRelatedField(
        source="user", slug_field="username", queryset=User.objects.filter(is_active=True)
    )
    team = serializers.PrimaryKeyRelatedField(queryset=Team.objects.none())
    role = serializers.ChoiceField(choices=Role.choices)

    class Meta:
        model = Membership
        fields = ["id", "team", "username", "role", "created_at"]
        read_only_fields = ["created_at"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            self.fields["team"].queryset = Team.objects.for_user(request.user)

    def validate(self, attrs):
        if self.instance is None and Membership.objects.filter(team=attrs["team"], user=attrs["user"]).exists():
            raise serializers.ValidationError({"username": "This user is already a member of the team."})
        return attrs


class RoleChangeSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


class LoginSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150, validators=[no_control_characters])
    password = serializers.CharField(max_length=256, trim_whitespace=False, style={"input_type": "password"})
    name = serializers.CharField(max_length=80, required=False, default="api", validators=[plain_name])
    otp = serializers.CharField(
        max_length=16, required=False, default="", help_text="A current two-factor code (or a recovery code), where required."
    )
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.choices), required=False, default=[Scope.READ, Scope.WRITE]
    )


class ApiTokenSerializer(serializers.ModelSerializer):
    teams = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    status = serializers.CharField(read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id", "name", "prefix", "scopes", "teams", "created_at", "expires_at", "last_used_at", "last_used_ip",
            "revoked_at", "status", "second_factor",
        ]  # fmt: skip


class TokenRequestSerializer(serializers.Serializer):
    """POST /api/v1/auth/tokens/: what the new token may do, where, and until when."""

    name = serializers.CharField(max_length=80, validators=[plain_name])
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=Scope.choices), allow_empty=False)
    teams = serializers.PrimaryKeyRelatedField(
        many=True, required=False, queryset=Team.objects.all(), help_text="Limit the token to these teams (default: all yours)."
    )
    expires_at = BoundedDateTimeField(required=False, help_text="Default: 90 days from now.")


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(ApiTokenSerializer.Meta):
        fields = ApiTokenSerializer.Meta.fields + ["token"]
