"""An audited append is one statement: on PostgreSQL ``record_event`` calls
``audit_append(…)``, which writes the record and, when the chain head is free, seals it
at once (and any records waiting before it), all inside the database; ``audit_seal(n)``
seals waiting records after a commit, also in one statement.

The server computes the chain hash itself, from the stored columns:
``audit_canonical(…)`` spells the canonical JSON exactly as ``audit/chain.py`` does
(``to_json`` of a text escapes ``"``, ``\\``, ``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t`` and
other control characters as ``\\u00XX``, and keeps every other character as it is, the
same rule as Python's ``json.dumps(…, ensure_ascii=False)``; the time as ISO text with
microseconds in UTC; ``details`` as its stored canonical text), and the hash is
``sha256(canonical ‖ previous hash)``. Verification keeps recomputing every hash in Python
from the columns, so the two spellings are checked against each other on every walk
(and ``tests/audit/test_audit_server_hash.py`` holds them equal on hostile text).

Nothing about the rules changes: numbers are still given only under the chain head's
row lock, in id order, gap-free; the triggers still refuse every edit but the one-time
sealing of a pending record and a forward move of the head along the chain.
"""

from django.db import migrations

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION audit_canonical(
    p_seq bigint, p_time timestamptz, p_actor_type text, p_actor_id text, p_actor_name text,
    p_team_id bigint, p_action text, p_target_type text, p_target_id text, p_outcome text,
    p_source_ip inet, p_user_agent text, p_request_id text, p_actor_role text,
    p_target_name text, p_details text
) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT '{"action":' || to_json(p_action)::text
        || ',"actor_id":' || to_json(p_actor_id)::text
        || ',"actor_name":' || to_json(p_actor_name)::text
        || CASE WHEN p_actor_role <> '' THEN ',"actor_role":' || to_json(p_actor_role)::text ELSE '' END
        || ',"actor_type":' || to_json(p_actor_type)::text
        || ',"details":' || p_details
        || ',"outcome":' || to_json(p_outcome)::text
        || ',"request_id":' || to_json(p_request_id)::text
        || ',"seq":' || p_seq::text
        || ',"source_ip":' || COALESCE(to_json(host(p_source_ip))::text, 'null')
        || ',"target_id":' || to_json(p_target_id)::text
        || CASE WHEN p_target_name <> '' THEN ',"target_name":' || to_json(p_target_name)::text ELSE '' END
        || ',"target_type":' || to_json(p_target_type)::text
        || ',"team_id":' || COALESCE(p_team_id::text, 'null')
        || ',"time":"' || to_char(p_time AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"') || '"'
        || ',"user_agent":' || to_json(p_user_agent)::text
        || '}'
$$;

CREATE OR REPLACE FUNCTION audit_link(p_canonical text, p_prev text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to(p_canonical || p_prev, 'UTF8')), 'hex')
$$;

-- Seal up to p_limit pending records, in id order, after the head (p_seq, p_hash). The
-- caller holds the chain head's row lock and moves the head afterwards.
CREATE OR REPLACE FUNCTION audit_seal_locked(
    p_seq bigint, p_hash text, p_limit integer, OUT o_seq bigint, OUT o_hash text
) LANGUAGE plpgsql AS $$
DECLARE
    r record;
    ids bigint[] := '{}';
    seqs bigint[] := '{}';
    prevs text[] := '{}';
    hashes text[] := '{}';
BEGIN
    o_seq := p_seq;
    o_hash := p_hash;
    FOR r IN
        SELECT e.id, e.time, e.actor_type, e.actor_id, e.actor_name, e.team_id, e.action,
               e.target_type, e.target_id, e.outcome, e.source_ip, e.user_agent, e.request_id,
               e.actor_role, e.target_name, e.details::text AS details
        FROM audit_auditevent e WHERE e.seq IS NULL ORDER BY e.id LIMIT p_limit
    LOOP
        o_seq := o_seq + 1;
        ids := ids || r.id;
        seqs := seqs || o_seq;
        prevs := prevs || o_hash;
        o_hash := audit_link(audit_canonical(
            o_seq, r.time, r.actor_type, r.actor_id, r.actor_name, r.team_id, r.action,
            r.target_type, r.target_id, r.outcome, r.source_ip, r.user_agent, r.request_id,
            r.actor_role, r.target_name, r.details), o_hash);
        hashes := hashes || o_hash;
    END LOOP;
    IF o_seq > p_seq THEN
        UPDATE audit_auditevent AS e SET seq = v.seq, prev_hash = v.prev, hash = v.hash
        FROM unnest(ids, seqs, prevs, hashes) AS v(id, seq, prev, hash) WHERE e.id = v.id;
    END IF;
END
$$;

-- The chain head, locked for this transaction, or NULLs when another transaction holds it.
CREATE OR REPLACE FUNCTION audit_try_head(OUT o_seq bigint, OUT o_hash text)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT h.seq, h.hash INTO o_seq, o_hash FROM audit_chainhead h WHERE h.id = 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM audit_chainhead h WHERE h.id = 1) THEN
        -- a flushed test database: the head as migrated
        INSERT INTO audit_chainhead (id, seq, hash) VALUES (1, 0, repeat('0', 64));
        SELECT h.seq, h.hash INTO o_seq, o_hash FROM audit_chainhead h WHERE h.id = 1 FOR UPDATE;
    END IF;
END
$$;

-- One audited append. When the chain head is free: seal the records waiting before this
-- one, then write this one sealed (its seq, prev_hash and hash set) and move the head,
-- which stays locked until the caller's transaction ends. When another transaction holds
-- the head: write it pending. Returns the record's id, its place (NULLs when pending) and
-- the head's number before the call (NULL when pending).
CREATE OR REPLACE FUNCTION audit_append(
    p_time timestamptz, p_actor_type text, p_actor_id text, p_actor_name text, p_team_id bigint,
    p_actor_role text, p_action text, p_target_type text, p_target_id text, p_target_name text,
    p_outcome text, p_source_ip inet, p_user_agent text, p_request_id text, p_details text,
    OUT o_id bigint, OUT o_seq bigint, OUT o_prev text, OUT o_hash text, OUT o_head bigint
) LANGUAGE plpgsql AS $$
DECLARE
    h_seq bigint;
    h_hash text;
BEGIN
    SELECT t.o_seq, t.o_hash INTO h_seq, h_hash FROM audit_try_head() t;
    IF h_seq IS NULL THEN
        INSERT INTO audit_auditevent (
            seq, time, actor_type, actor_id, actor_name, team_id, actor_role, action, target_type,
            target_id, target_name, outcome, source_ip, user_agent, request_id, details, prev_hash, hash
        ) VALUES (
            NULL, p_time, p_actor_type, p_actor_id, p_actor_name, p_team_id, p_actor_role, p_action,
            p_target_type, p_target_id, p_target_name, p_outcome, p_source_ip, p_user_agent,
            p_request_id, p_details::json, '', ''
        ) RETURNING id INTO o_id;
        RETURN;
    END IF;
    o_head := h_seq;
    IF EXISTS (SELECT 1 FROM audit_auditevent e WHERE e.seq IS NULL) THEN
        SELECT s.o_seq, s.o_hash INTO h_seq, h_hash FROM audit_seal_locked(h_seq, h_hash, 10000) s;
    END IF;
    o_seq := h_seq + 1;
    o_prev := h_hash;
    o_hash := audit_link(audit_canonical(
        o_seq, p_time, p_actor_type, p_actor_id, p_actor_name, p_team_id, p_action, p_target_type,
        p_target_id, p_outcome, p_source_ip, p_user_agent, p_request_id, p_actor_role,
        p_target_name, p_details), o_prev);
    INSERT INTO audit_auditevent (
        seq, time, actor_type, actor_id, actor_name, team_id, actor_role, action, target_type,
        target_id, target_name, outcome, source_ip, user_agent, request_id, details, prev_hash, hash
    ) VALUES (
        o_seq, p_time, p_actor_type, p_actor_id, p_actor_name, p_team_id, p_actor_role, p_action,
        p_target_type, p_target_id, p_target_name, p_outcome, p_source_ip, p_user_agent,
        p_request_id, p_details::json, o_prev, o_hash
    ) RETURNING id INTO o_id;
    UPDATE audit_chainhead SET seq = o_seq, hash = o_hash WHERE id = 1;
END
$$;

-- Seal up to p_limit waiting records in a transaction of its own (autocommit), unless
-- none wait or another transaction holds the head (o_old NULL: its holder looks again
-- once it lets go). Returns the head's number before and after.
CREATE OR REPLACE FUNCTION audit_seal(p_limit integer, OUT o_old bigint, OUT o_new bigint)
LANGUAGE plpgsql AS $$
DECLARE
    h_hash text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM audit_auditevent e WHERE e.seq IS NULL) THEN
        RETURN;
    END IF;
    SELECT t.o_seq, t.o_hash INTO o_old, h_hash FROM audit_try_head() t;
    IF o_old IS NULL THEN
        RETURN;
    END IF;
    SELECT s.o_seq, s.o_hash INTO o_new, h_hash FROM audit_seal_locked(o_old, h_hash, p_limit) s;
    IF o_new > o_old THEN
        UPDATE audit_chainhead SET seq = o_new, hash = h_hash WHERE id = 1;
    END IF;
END
$$;
"""

UNDO = """
DROP FUNCTION IF EXISTS audit_seal(integer);
DROP FUNCTION IF EXISTS audit_append(timestamptz, text, text, text, bigint, text, text, text, text, text, text, inet, text, text, text);
DROP FUNCTION IF EXISTS audit_try_head();
DROP FUNCTION IF EXISTS audit_seal_locked(bigint, text, integer);
DROP FUNCTION IF EXISTS audit_link(text, text);
DROP FUNCTION IF EXISTS audit_canonical(bigint, timestamptz, text, text, text, bigint, text, text, text, text, inet, text, text, text, text, text);
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTIONS, params=None)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNDO, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0009_sealed_appends")]

    operations = [migrations.RunPython(install, uninstall)]
