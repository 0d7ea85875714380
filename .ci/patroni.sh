# Sourced by .ci/run (and by hand: `source .ci/patroni.sh`): starts a throwaway
# high-availability PostgreSQL 15 on loopback, as docs/postgres.md ("High
# availability") describes: one etcd member as the cluster's store of state and two
# Patroni nodes, a primary and a synchronous standby (`synchronous_mode: true`), and
# exports
#   RAILYARD_TEST_PATRONI        a URL naming both nodes, target_session_attrs=read-write
#   RAILYARD_TEST_PATRONI_NODES  each node as `REST port:node directory`, comma separated
#                                (the directory holds `patroni.yml` and `data/`)
# for the failover tests (tests/e2e/failover.rs). Everything is stopped and removed
# when the shell that sourced this exits. Debian's packages: patroni, etcd-server,
# postgresql-15 (installed here when missing).

ha_pg_bin=/usr/lib/postgresql/15/bin
if [ ! -x /usr/bin/patroni ] || [ ! -x /usr/bin/etcd ] || [ ! -x "$ha_pg_bin/initdb" ]; then
  echo "installing patroni, etcd-server and postgresql-15"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patroni etcd-server postgresql-15 >/dev/null
fi

ha_dir="$(mktemp -d "${TMPDIR:-/tmp}/railyard-ha.XXXXXX")"
chmod 755 "$ha_dir"
if [ "$(id -u)" = 0 ]; then
  chown postgres:postgres "$ha_dir"
  ha_as() { runuser -u postgres -- "$@"; }
else
  ha_as() { "$@"; }
fi
ha_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# GET a URL: its body, and success only for a 2xx answer (no curl on a bare machine).
ha_get() {
  python3 - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        sys.stdout.write(r.read().decode())
except Exception:
    sys.exit(1)
PY
}
ha_etcd_client="$(ha_port)"
ha_etcd_peer="$(ha_port)"
ha_pids=()

ha_stop() {
  for pid in "${ha_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  sleep 1
  for pid in "${ha_pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  pkill -9 -f "$ha_dir" 2>/dev/null || true
  rm -rf "$ha_dir"
}
# After whatever the shell already runs on exit (.ci/postgres.sh's cluster's stop).
ha_prev_exit="$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")"
trap "ha_stop; $ha_prev_exit" EXIT

ha_as etcd --name ha --data-dir "$ha_dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$ha_etcd_client" \
  --advertise-client-urls "http://127.0.0.1:$ha_etcd_client" \
  --listen-peer-urls "http://127.0.0.1:$ha_etcd_peer" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ha_etcd_peer" \
  --initial-cluster "ha=http://127.0.0.1:$ha_etcd_peer" >"$ha_dir/etcd.log" 2>&1 &
ha_pids+=($!)

ha_nodes=""
ha_hosts=""
for n in 1 2; do
  pg="$(ha_port)"
  rest="$(ha_port)"
  mkdir -p "$ha_dir/pg$n"
  chmod 700 "$ha_dir/pg$n"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$ha_dir/pg$n"
  cat >"$ha_dir/pg$n/patroni.yml" <<EOF
scope: railyard-ci
name: pg$n
restapi:
  listen: 127.0.0.1:$rest
  connect_address: 127.0.0.1:$rest
etcd3:
  hosts: 127.0.0.1:$ha_etcd_client
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: false
      parameters:
        max_connections: 200
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 5
        max_replication_slots: 5
  initdb:
    - encoding: UTF8
    - auth: trust
  pg_hba:
    - host replication replicator 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$pg
  connect_address: 127.0.0.1:$pg
  data_dir: $ha_dir/pg$n/data
  bin_dir: $ha_pg_bin
  pgpass: $ha_dir/pg$n/pgpass
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: replicator
      password: replicator
  parameters:
    unix_socket_directories: $ha_dir/pg$n
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
EOF
  ha_as patroni "$ha_dir/pg$n/patroni.yml" >"$ha_dir/patroni$n.log" 2>&1 &
  ha_pids+=($!)
  ha_nodes="${ha_nodes:+$ha_nodes,}$rest:$ha_dir/pg$n"
  ha_hosts="${ha_hosts:+$ha_hosts,}127.0.0.1:$pg"
  # The first node bootstraps the cluster before the second clones it.
  if [ "$n" = 1 ]; then
    for _ in $(seq 1 120); do
      ha_get "http://127.0.0.1:$rest/primary" >/dev/null && break
      sleep 0.5
    done
  fi
done

# Ready: a primary and a streaming synchronous standby.
ha_ready=""
for _ in $(seq 1 240); do
  if ha_get "http://127.0.0.1:${ha_nodes%%:*}/cluster" | grep -q '"sync_standby"'; then
    ha_ready=1
    break
  fi
  sleep 0.5
done
if [ -z "$ha_ready" ]; then
  echo "the Patroni cluster did not come up; its logs:" >&2
  tail -n 30 "$ha_dir"/*.log >&2
  return 1 2>/dev/null || exit 1
fi
PGPASSWORD=postgres "$ha_pg_bin/psql" -X -q -v ON_ERROR_STOP=1 \
  "postgres://postgres@$ha_hosts/postgres?target_session_attrs=read-write" -c "CREATE DATABASE railyard"

export RAILYARD_TEST_PATRONI="postgres://postgres:postgres@$ha_hosts/railyard?target_session_attrs=read-write"
export RAILYARD_TEST_PATRONI_NODES="$ha_nodes"
echo "Patroni $(patroni --version | cut -d " " -f 2): a primary and a synchronous standby on $ha_hosts ($ha_dir)"
