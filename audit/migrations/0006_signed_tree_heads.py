"""Checkpoints become Ed25519-signed Merkle tree heads; public keys are listed.

The HMAC checkpoints before this cannot be checked without the old secret, so they are
dropped with their table; the first new head is signed only after the whole chain has
verified from its first event. On PostgreSQL the new tables get the append-only triggers
of 0004, the signing-key list may only have a key retired (``valid_until`` set once), and
the chain head may only move forward one event at a time, to a hash the event table holds.
"""

from django.db import migrations, models

TRIGGERS = r"""
CREATE OR REPLACE FUNCTION audit_key_retire_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.valid_until IS NULL AND NEW.valid_until IS NOT NULL
       AND NEW.fingerprint = OLD.fingerprint AND NEW.public_pem = OLD.public_pem
       AND NEW.valid_from = OLD.valid_from AND NEW.id = OLD.id THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;

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

CREATE TRIGGER audit_checkpoint_append_only BEFORE UPDATE OR DELETE ON audit_checkpoint
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_checkpoint_no_truncate BEFORE TRUNCATE ON audit_checkpoint
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_truncate();
CREATE TRIGGER audit_signingkey_append_only BEFORE UPDATE OR DELETE ON audit_signingkey
    FOR EACH ROW EXECUTE FUNCTION audit_key_retire_only();
CREATE TRIGGER audit_signingkey_no_truncate BEFORE TRUNCATE ON audit_signingkey
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_truncate();
CREATE TRIGGER audit_chainhead_forward_only BEFORE INSERT OR UPDATE OR DELETE ON audit_chainhead
    FOR EACH ROW EXECUTE FUNCTION audit_head_forward_only();
CREATE TRIGGER audit_chainhead_no_truncate BEFORE TRUNCATE ON audit_chainhead
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_truncate();
"""

UNDO = r"""
DROP TRIGGER IF EXISTS audit_chainhead_forward_only ON audit_chainhead;
DROP TRIGGER IF EXISTS audit_chainhead_no_truncate ON audit_chainhead;
DROP FUNCTION IF EXISTS audit_head_forward_only();
DROP FUNCTION IF EXISTS audit_key_retire_only() CASCADE;
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGERS, params=None)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNDO, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0005_details_as_canonical_json")]

    operations = [
        migrations.DeleteModel(name="Checkpoint"),
        migrations.CreateModel(
            name="Checkpoint",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("seq", models.BigIntegerField(unique=True)),
                ("hash", models.CharField(max_length=64)),
                ("root", models.CharField(max_length=64)),
                ("frontier", models.JSONField(default=list)),
                ("time", models.DateTimeField()),
                ("key_id", models.CharField(max_length=64)),
                ("signature", models.CharField(max_length=100)),
            ],
            options={"ordering": ["seq"]},
        ),
        migrations.CreateModel(
            name="SigningKey",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("fingerprint", models.CharField(max_length=64, unique=True)),
                ("public_pem", models.TextField()),
                ("valid_from", models.DateTimeField()),
                ("valid_until", models.DateTimeField(blank=True, null=True)),
            ],
            options={"ordering": ["valid_from"]},
        ),
        migrations.RunPython(install, uninstall),
    ]
