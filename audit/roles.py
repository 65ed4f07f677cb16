"""Database roles on PostgreSQL: the app connects as a role that owns nothing, so it can
neither disable the audit triggers (only a table's owner can) nor alter, drop or truncate
the audit tables; a separate owner role runs migrations. ``manage.py audit_db_roles``
prints the grants below for the app's role; docs/audit.md says how to set both up."""

from __future__ import annotations

# What the app may do to each audit table; the triggers narrow it further (events: only
# the sealing of a pending record, which sets its place columns once, and retention's
# DELETE of rows past 180 days; chain head: forward along the chain; signing keys:
# retire once). Nothing here lets the app touch a trigger.
AUDIT_TABLE_PRIVILEGES = {
    "audit_auditevent": "SELECT, INSERT, UPDATE (seq, prev_hash, hash), DELETE",
    "audit_checkpoint": "SELECT, INSERT",
    "audit_chainhead": "SELECT, INSERT, UPDATE",
    "audit_signingkey": "SELECT, INSERT, UPDATE",
}


def quote(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"{name!r} is not a plain role name (letters, digits, underscores)")
    return f'"{name}"'


def grant_statements(app_role: str, owner_role: str | None = None) -> list[str]:
    app = quote(app_role)
    audit = ", ".join(AUDIT_TABLE_PRIVILEGES)
    statements = [
        f"GRANT USAGE ON SCHEMA public TO {app}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {app}",
        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {app}",
        f"REVOKE ALL ON {audit} FROM {app}",
    ]
    statements += [
        f"GRANT {privileges} ON {table} TO {app}"
        for table, privileges in AUDIT_TABLE_PRIVILEGES.items()
    ]
    if owner_role:
        owner = quote(owner_role)
        statements += [
            f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public "
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app}",
            f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public "
            f"GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {app}",
        ]
    return statements
