# Sourced by .ci/run (and by hand: `source .ci/postgres.sh`): starts a throwaway
# PostgreSQL 15 cluster on a free loopback port and exports
#   RAILYARD_TEST_POSTGRES               a database at the default isolation (READ COMMITTED)
#   RAILYARD_TEST_POSTGRES_SERIALIZABLE  one whose default isolation is SERIALIZABLE
# for the tests that run on Postgres (docs/postgres.md). The cluster is stopped and
# removed when the shell that sourced this exits. fsync is off: the cluster is thrown
# away, and durability is not what the tests check.

pg_bin=/usr/lib/postgresql/15/bin
if [ ! -x "$pg_bin/initdb" ]; then
  echo "installing postgresql-15"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
fi

pg_dir="$(mktemp -d "${TMPDIR:-/tmp}/railyard-pg.XXXXXX")"
# initdb refuses root: as root, the cluster belongs to the postgres user.
if [ "$(id -u)" = 0 ]; then
  chown postgres:postgres "$pg_dir"
  pg_as() { runuser -u postgres -- "$@"; }
else
  pg_as() { "$@"; }
fi
pg_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

pg_stop() {
  pg_as "$pg_bin/pg_ctl" -D "$pg_dir/data" stop -m immediate >/dev/null 2>&1 || true
  rm -rf "$pg_dir"
}
trap pg_stop EXIT

pg_as "$pg_bin/initdb" -D "$pg_dir/data" -A trust -U postgres >"$pg_dir/initdb.log"
pg_as "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" \
  -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" -w start >/dev/null
pg_sql() { "$pg_bin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "$1"; }
pg_sql "CREATE DATABASE railyard"
pg_sql "CREATE DATABASE railyard_serializable"
pg_sql "ALTER DATABASE railyard_serializable SET default_transaction_isolation = 'serializable'"

export RAILYARD_TEST_POSTGRES="postgres://postgres@127.0.0.1:$pg_port/railyard"
export RAILYARD_TEST_POSTGRES_SERIALIZABLE="postgres://postgres@127.0.0.1:$pg_port/railyard_serializable"
echo "PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$pg_port ($pg_dir)"
