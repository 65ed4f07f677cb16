"""The Django admin (/django-admin/) changes rows without going through services. Its own
log entries are mirrored into the audit log in the admin's transaction, and its sign-ins
are recorded like the console's.

Limitation: the admin's bulk "delete selected" of several objects writes its log entries
with ``bulk_create``, which sends no signal, so those deletions are not mirrored.
"""

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import AnonymousUser
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import post_save

ACTIONS = {ADDITION: "admin.add", CHANGE: "admin.change", DELETION: "admin.delete"}


def _from_admin(request) -> bool:
    match = getattr(request, "resolver_match", None)
    return bool(match and match.namespace == "admin")


def mirror_log_entry(sender, instance: LogEntry, created: bool, **kwargs) -> None:
    from .services import record_event

    if not created:
        return
    content_type = instance.content_type
    record_event(
        actor=instance.user,
        action=ACTIONS.get(instance.action_flag, "admin.change"),
        target_type=f"{content_type.app_label}.{content_type.model}" if content_type else "",
        target_id=instance.object_id or "",
        details={"object": instance.object_repr, "change": instance.get_change_message()},
    )


def admin_login(sender, request, user, **kwargs) -> None:
    from .services import record_event

    if _from_admin(request):
        record_event(actor=user, action="auth.login", target=user, details={"via": "admin"})


def admin_logout(sender, request, user, **kwargs) -> None:
    from .services import record_event

    if user is not None and _from_admin(request):
        record_event(actor=user, action="auth.logout", target=user, details={"via": "admin"})


def admin_login_failed(sender, credentials, request=None, **kwargs) -> None:
    from .services import record_event

    if request is not None and _from_admin(request):
        username = str(credentials.get("username", ""))[:150]
        record_event(
            actor=AnonymousUser(),
            action="auth.login_failed",
            outcome="failure",
            details={"username": username, "via": "admin"},
        )


def connect() -> None:
    post_save.connect(mirror_log_entry, sender=LogEntry, dispatch_uid="audit.mirror_log_entry")
    user_logged_in.connect(admin_login, dispatch_uid="audit.admin_login")
    user_logged_out.connect(admin_logout, dispatch_uid="audit.admin_logout")
    user_login_failed.connect(admin_login_failed, dispatch_uid="audit.admin_login_failed")
