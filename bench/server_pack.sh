#!/usr/bin/env bash
# Packs what bench/server_session.sh needs on a bare x86-64 machine with Python 3.12 and
# no network: the console's dependencies for Python 3.12 (site312.tar.xz) and this
# machine's PostgreSQL 15 and Redis with the libraries they link (pgredis.tar.xz), both
# into .devcarry/ (ignored by git). Run here, from the repository root:
#   bash bench/server_pack.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d /tmp/server-pack-XXXX)"
trap 'rm -rf "$work"' EXIT
mkdir -p .devcarry "$work/whl"
plat=()
for p in manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  plat+=(--platform "$p")
done
# The console's runtime dependencies as installed here (no test tools), and granian.
.venv/bin/pip freeze | grep -v -i -E '^(-e|#|playwright|pytest|hypothesis|schemathesis|ruff|grimp|execnet|iniconfig|pluggy|greenlet|graphql|harfile|pyrate|werkzeug|django-oidc-provider|jsonschema.rs|pygments|rich|markdown-it|mdurl)' \
  >"$work/req.txt"
echo "granian==2.8.9" >>"$work/req.txt"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
  -d "$work/whl" -r "$work/req.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" --python-version 3.12 \
  --implementation cp --only-binary=:all: "${plat[@]}" "$work"/whl/*.whl
# What a server run never reads: translations, tests, notebook and API-browser assets.
( cd "$work/site"
  find . -path '*/locale/*' -type f -not -path '*/locale/en/*' -not -name '*.py' -delete  # keep the modules (django.conf.locale)
  rm -rf plotly/labextension drf_spectacular_sidecar/static share etc twisted/test twisted/*/test \
         django/contrib/admin/static django/contrib/gis
  find . -name __pycache__ -prune -exec rm -rf {} + )
tar -C "$work/site" -cf - . | xz -6 -T2 >.devcarry/site312.tar.xz

# PostgreSQL 15 (server, initdb, pg_ctl, its modules and data files) and redis-server,
# with every library they link but the C library's own.
pg=/usr/lib/postgresql/15
root="$work/pg/root"
mkdir -p "$root$pg/bin" "$root/usr/share/postgresql" "$root/usr/share/zoneinfo" "$work/pg/libs"
cp "$pg"/bin/{postgres,initdb,pg_ctl} "$root$pg/bin/"
cp -r "$pg/lib" "$root$pg/"
rm -rf "$root$pg/lib/bitcode"
cp -r /usr/share/postgresql/15 "$root/usr/share/postgresql/"
rm -rf "$root/usr/share/postgresql/15/man"
cp -r /usr/share/zoneinfo/UTC /usr/share/zoneinfo/Etc "$root/usr/share/zoneinfo/"
redis="$(readlink -f "$(command -v redis-server)")"
cp -L "$redis" "$work/pg/redis-server"
for bin in "$pg/bin/postgres" "$pg/bin/initdb" "$redis"; do ldd "$bin" | awk '/=>/ {print $3}'; done | sort -u \
  | grep -v -E '/(libc|libm|ld-linux|libresolv|libpthread|libdl)[.-]' | xargs -I{} cp -L {} "$work/pg/libs/"
tar -C "$work/pg" -cf - . | xz -9 -T2 >.devcarry/pgredis.tar.xz
ls -l .devcarry
