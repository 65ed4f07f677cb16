from rest_framework import serializers

from console.validators import plain_name
from instances.models import Host

from .models import (
    GpuEvent,
    GpuLatest,
    HostToken,
    stale_after_s,
)


class HostTokenSerializer(serializers.ModelSerializer):
    host = serializers.SlugRelatedField(slug_field="name", queryset=Host.objects.all())
    name = serializers.CharField(max_length=80, required=False, allow_blank=True, default="", validators=[plain_name])
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = HostToken
        fields = [
            "id", "host", "name", "prefix", "created_by", "created_at", "expires_at", "last_used_at", "revoked_at",
            "replaced_by", "status",
        ]  # fmt: skip
        read_only_fields = ["prefix", "created_at", "expires_at", "last_used_at", "revoked_at", "replaced_by", "status"]


class NewHostTokenSerializer(HostTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The raw token: shown once, never again.")

    class Meta(HostTokenSerializer.Meta):
        fields = [*HostTokenSerializer.Meta.fields, "token"]

class GpuEventSerializer(serializers.ModelSerializer):
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = GpuEvent
        fields = ["id", "time", "kind", "host", "uuid", "code", "message", "instance", "team", "details"]
        read_only_fields = fields


class GpuLatestSerializer(serializers.ModelSerializer):
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gpu = serializers.SlugRelatedField(slug_field="uuid", read_only=True)
    stale = serializers.SerializerMethodField()
    job = serializers.CharField(read_only=True, allow_null=True, default=None, help_text="the job whose run holds it")

    class Meta:
        model = GpuLatest
        fields = ["uuid", "gpu", "host", "instance", "team", "job", "time", "last_seen", "stale", "metrics"]
        read_only_fields = fields

    def get_stale(self, row) -> bool:
        return row.is_stale(self.context.get("now"), stale_after_s())
