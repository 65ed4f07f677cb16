"""The Django admin bypasses services; its log entries are mirrored into the audit log."""

from audit_support import events_after, head_seq
from django.contrib.auth.models import Group


def test_adding_a_group_in_the_admin_is_audited(logged_in, ops):
    ops.is_superuser = True
    ops.save()
    before = head_seq()
    response = logged_in(ops).post("/django-admin/auth/group/add/", {"name": "night-shift"})
    assert response.status_code == 302
    (event,) = events_after(before)
    group = Group.objects.get(name="night-shift")
    assert (event.action, event.actor_name, event.target_type, event.target_id) == (
        "admin.add", "ops", "auth.group", str(group.pk),
    )  # fmt: skip


def test_a_failed_admin_sign_in_is_audited(client, ops):
    before = head_seq()
    client.post("/django-admin/login/", {"username": "ops", "password": "wrong"})
    assert [e.action for e in events_after(before)] == ["auth.login_failed"]
