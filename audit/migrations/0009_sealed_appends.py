"""Appends no longer wait on the chain head: a record may be written *pending* (no
``seq``, ``prev_hash`` or ``hash`` yet) and sealed moments later by whoever holds the
chain head, which gives it the next place in the chain.

On PostgreSQL the events' trigger now lets exactly one UPDATE through per record: the
sealing of a pending record, which sets ``seq`` (beyond the chain head), ``prev_hash`` and
``hash`` and changes nothing else. Every other UPDATE, and every DELETE but retention's,
is refused as before, so a pending record is as immutable as a sealed one. The chain head
may now move forward by several records at once, along the chain: the record after the
old head follows its hash, every record up to the new head is there, and the new head's
hash is its record's.
"""

from django.db import migrations, models
from django.db.models import Q

CONTENT = (
    "time", "actor_type", "actor_id", "actor_name", "actor_role", "team_id", "action",
    "target_type", "target_id", "target_name", "outcome", "source_ip", "user_agent", "request_id",
)  # fmt: skip
_NEW = ", ".join([f"NEW.{c}" for c in CONTENT] + ["NEW.details::text"])
_OLD = ", ".join([f"OLD.{c}" for c in CONTENT] + ["OLD.details::text"])

TRIGGERS = rf"""
CREATE OR REPLACE FUNCTION audit_event_seal_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.seq IS NULL AND OLD.hash = '' AND OLD.prev_hash = ''
       AND NEW.id = OLD.id AND NEW.seq IS NOT NULL
       AND NEW.seq > (SELECT h.seq FROM audit_chainhead h WHERE h.id = 1)
       AND NEW.hash ~ '^[0-9a-f]{{64}}$' AND NEW.prev_hash ~ '^[0-9a-f]{{64}}$'
       AND ROW({_NEW}) IS NOT DISTINCT FROM ROW({_OLD}) THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'DELETE' AND current_setting('audit.allow_retention', true) = 'on'
       AND OLD.time < now() - interval '180 days' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;

DROP TRIGGER IF EXISTS audit_auditevent_append_only ON audit_auditevent;
CREATE TRIGGER audit_auditevent_append_only BEFORE UPDATE OR DELETE ON audit_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_event_seal_only();

CREATE OR REPLACE FUNCTION audit_head_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id AND NEW.seq > OLD.seq
       AND NEW.hash = (SELECT e.hash FROM audit_auditevent e WHERE e.seq = NEW.seq)
       AND OLD.hash = (SELECT e.prev_hash FROM audit_auditevent e WHERE e.seq = OLD.seq + 1)
       AND (SELECT count(*) FROM audit_auditevent e WHERE e.seq > OLD.seq AND e.seq <= NEW.seq)
           = NEW.seq - OLD.seq THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' AND NOT EXISTS (SELECT 1 FROM audit_chainhead) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: % on % refused (the chain head only moves forward)',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END
$$;
"""

UNDO = r"""
DROP TRIGGER IF EXISTS audit_auditevent_append_only ON audit_auditevent;
CREATE TRIGGER audit_auditevent_append_only BEFORE UPDATE OR DELETE ON audit_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
DROP FUNCTION IF EXISTS audit_event_seal_only();
CREATE OR REPLACE FUNCTION audit_head_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id AND NEW.seq = OLD.seq + 1
       AND NEW.hash = (SELECT e.hash FROM audit_auditevent e WHERE e.seq = NEW.seq) THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' AND NOT EXISTS (SELECT 1 FROM audit_chainhead) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: % on % refused (the chain head only moves forward)',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END
$$;
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGERS, params=None)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNDO, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0008_refusal_tally")]

    operations = [
        migrations.AlterField(
            model_name="auditevent", name="seq", field=models.BigIntegerField(blank=True, null=True, unique=True)
        ),
        migrations.AlterField(
            model_name="auditevent", name="prev_hash", field=models.CharField(blank=True, default="", max_length=64)
        ),
        migrations.AlterField(
            model_name="auditevent", name="hash", field=models.CharField(blank=True, default="", max_length=64)
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(condition=Q(seq__isnull=True), fields=["id"], name="audit_event_pending_idx"),
        ),
        migrations.RunPython(install, uninstall),
    ]
