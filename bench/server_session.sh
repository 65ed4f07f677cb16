#!/usr/bin/env bash
# The server-side benchmarks on a larger machine (16 cores and more) with no network and
# nothing installed but Python 3.12: PostgreSQL 15 and Redis are started from
# .devcarry/pgredis.tar.xz and the console's dependencies come from
# .devcarry/site312.tar.xz (both made here by bench/server_pack.sh).
#   bash bench/server_session.sh pg     # server CPU per reading (PostgreSQL, 1 browser), audited appends, billing
#   bash bench/server_session.sh live   # 1,000 GPUs x 20 browsers, memory and two workers on Redis
#   bash bench/server_session.sh live_workers   # the same with agents over 4 workers, 50 ms coalescing
#   bash bench/server_session.sh audit_appends,live_1000x20   # any of them by name, comma-separated
#   bash bench/server_session.sh setup  # only PostgreSQL, Redis and Python set up, for runs of one's own
# Every benchmark's own printout goes to $OUT/<name>.txt, the machine to $OUT/machine.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
part="${1:-pg}"
for name in ${part//,/ }; do
  case "$name" in
    setup|pg|live|all|cpu_per_reading|audit_appends|billing|live_1000x20|live_workers) ;;
    *) echo "unknown part '$name': setup, pg, live, all, cpu_per_reading, audit_appends, billing, live_1000x20 or live_workers" >&2
       exit 2 ;;
  esac
done
OUT="${OUT:-/tmp/server-session}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TZ=UTC

# Python: a bin/ of its own, so that the benchmarks find daphne, granian and the agent
# beside sys.executable as they do in a virtual environment.
site=/tmp/site
mkdir -p "$site" /tmp/v/bin
tar -C "$site" -xJf .devcarry/site312.tar.xz || exit 1
ln -sf "$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')" /tmp/v/bin/python
for entry in "daphne daphne.cli CommandLineInterface.entrypoint" "granian granian.cli entrypoint" \
             "gpuconsole-agent agent.cli main"; do
  set -- $entry
  printf '#!/tmp/v/bin/python\nimport sys\nfrom %s import %s\nsys.exit(%s())\n' "$2" "${3%%.*}" "$3" >"/tmp/v/bin/$1"
  chmod +x "/tmp/v/bin/$1"
done
export PYTHONPATH="$site:$PWD"
PY=/tmp/v/bin/python

# PostgreSQL 15 and Redis, as on the development machines (trust auth, loopback).
mkdir -p /tmp/pgb
tar -C /tmp/pgb -xJf .devcarry/pgredis.tar.xz || exit 1
cp -r --update=none /tmp/pgb/root/. / 2>/dev/null || cp -rn /tmp/pgb/root/. /
pguser=pg  # PostgreSQL refuses to run as root
id pg >/dev/null 2>&1 || useradd -M -s /bin/sh pg 2>/dev/null || pguser=nobody
pgenv="LD_LIBRARY_PATH=/tmp/pgb/libs TZ=UTC"
bin=/usr/lib/postgresql/15/bin
if [ ! -d /tmp/pgdata ]; then
  mkdir -p /tmp/pgdata && chown "$pguser" /tmp/pgdata
  su -s /bin/sh "$pguser" -c "$pgenv $bin/initdb -D /tmp/pgdata -U postgres --auth=trust -E UTF8 --locale=C.UTF-8" >"$OUT/initdb.txt" 2>&1 \
    || su -s /bin/sh "$pguser" -c "$pgenv $bin/initdb -D /tmp/pgdata -U postgres --auth=trust -E UTF8 --locale=C" >>"$OUT/initdb.txt" 2>&1
fi
su -s /bin/sh "$pguser" -c "$pgenv $bin/pg_ctl -D /tmp/pgdata -l /tmp/pgdata/log -w -o '-h 127.0.0.1 -p 5432 -k /tmp' start" >"$OUT/pg.txt" 2>&1
LD_LIBRARY_PATH=/tmp/pgb/libs /tmp/pgb/redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" \
  --appendonly no >>"$OUT/pg.txt" 2>&1
{
  date -u; uptime; nproc; uname -r; lscpu | grep -E 'Model name|^CPU\(s\)|MHz' ; free -g | head -2
  $PY -c "import sys, django, daphne, twisted, granian, psycopg; print(sys.version.split()[0], 'django', django.__version__, 'daphne', daphne.__version__, 'twisted', twisted.__version__, 'granian', granian.__version__, 'psycopg', psycopg.__version__)"
  $PY -c "import psycopg; c = psycopg.connect('postgresql://postgres@127.0.0.1:5432/postgres'); print(c.execute('select version()').fetchone()[0])"
  $PY -c "import redis; print('redis', redis.Redis().info()['redis_version'])"
} >"$OUT/machine.txt" 2>&1

status=0
run() {  # name, then the command
  local name=$1; shift
  echo "== $(date -u +%H:%M:%S) $name: $*" | tee -a "$OUT/machine.txt"
  uptime >"$OUT/$name.txt"
  "$@" >>"$OUT/$name.txt" 2>&1
  local rc=$?
  { echo "exit $rc"; uptime; } >>"$OUT/$name.txt"
  [ "$rc" = 0 ] || status=$rc
  grep -v -E 'kombu|celery' "$OUT/$name.txt" | tail -n 25
}
pgurl=postgres://postgres@127.0.0.1:5432
wants() { [[ ",$part," == *",$1,"* || ",$part," == *",$2,"* || "$part" == all ]]; }
if wants pg cpu_per_reading; then
  run cpu_per_reading env DATABASE_URL=$pgurl/h9db $PY bench/live_latency.py --clients 1 --seconds 20 --warmup 8 \
    --layers memory --servers daphne,granian,floor-daphne,floor-granian
fi
if wants pg audit_appends; then
  run audit_appends $PY bench/audit.py --append-only --append-seconds 4
fi
if wants pg billing; then
  run billing env DATABASE_URL=$pgurl/gpc_bench_billing $PY bench/billing.py --instances 10000
fi
if wants live live_1000x20; then
  run live_1000x20 $PY bench/live_latency.py --seconds 20 --warmup 8 --layers memory,redis2 \
    --servers daphne,granian,floor-daphne,floor-granian --redis redis://127.0.0.1:6379/9
fi
if wants live_workers live_workers; then  # agents over 4 workers, browsers on a fifth; 50 ms coalescing
  run live_workers $PY bench/live_latency.py --seconds 20 --warmup 8 --layers memory,redis5 --coalesce 0.05 \
    --servers daphne,granian --redis redis://127.0.0.1:6379/9
fi
uptime >>"$OUT/machine.txt"
exit $status
