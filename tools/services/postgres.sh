#!/usr/bin/env bash
# A scratch PostgreSQL server for the tests: a fresh cluster in a temporary
# directory, on 127.0.0.1 at a free port and on a Unix socket in that
# directory, trusted logins, the `postgres` superuser. One per checkout, so
# worktrees side by side do not share one.
#
#   eval "$(tools/services/postgres.sh start)"   start (or reuse) it; prints the export
#   tools/services/postgres.sh stop              stop it and delete its data
#
# `./x test` sources this file and calls `postgres_start` / `postgres_stop`.
# Idempotent: `start` reuses a server this checkout already runs, `stop` does
# nothing when none runs. As root (CI), the server runs as the `postgres`
# user (initdb refuses root), and the binaries are installed with apt-get if
# they are missing.

# The cluster's directory for this checkout.
postgres_dir() {
    local root
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    echo "${TMPDIR:-/tmp}/tether-postgres-$(printf '%s' "$root" | cksum | cut -d' ' -f1)"
}

# Runs a command as the user the server runs as.
postgres_as() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# The directory of initdb and pg_ctl, installing PostgreSQL if it is missing.
postgres_bindir() {
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    if [ -z "$dir" ] && command -v pg_config >/dev/null 2>&1; then
        dir="$(pg_config --bindir)"
    fi
    if [ -z "$dir" ] || [ ! -x "$dir/initdb" ]; then
        if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
            echo "postgres.sh: PostgreSQL's server binaries (initdb, pg_ctl) are missing: install PostgreSQL" >&2
            return 1
        fi
        echo "postgres.sh: installing PostgreSQL with apt-get" >&2
        # No cluster of the package's own: the tests make theirs.
        mkdir -p /etc/postgresql-common
        [ -e /etc/postgresql-common/createcluster.conf ] ||
            echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >&2 ||
            { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >&2; } ||
            return 1
        dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    fi
    echo "$dir"
}

postgres_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts the server (or finds it running) and exports TETHER_TEST_POSTGRES_URL;
# sets TETHER_POSTGRES_STARTED=1 when this call started it.
postgres_start() {
    local bin dir port
    bin="$(postgres_bindir)" || return 1
    dir="$(postgres_dir)"
    TETHER_POSTGRES_STARTED=0
    if [ -f "$dir/port" ] && postgres_as "$bin/pg_ctl" status -D "$dir/data" >/dev/null 2>&1; then
        port="$(cat "$dir/port")"
    else
        # A stopped or half-made cluster of an earlier run: start afresh.
        postgres_stop
        mkdir -p "$dir"
        if [ "$(id -u)" = 0 ]; then
            id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
            chown postgres "$dir"
        fi
        chmod 700 "$dir"
        if ! postgres_as "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --no-locale --no-sync \
            >"$dir/initdb.log" 2>&1; then
            echo "postgres.sh: initdb failed:" >&2
            cat "$dir/initdb.log" >&2
            return 1
        fi
        # A port found free may be taken before the server binds it: try a few.
        local attempt
        for attempt in 1 2 3 4 5; do
            port="$(postgres_free_port)"
            if postgres_as "$bin/pg_ctl" start -w -t 60 -D "$dir/data" -l "$dir/server.log" \
                -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" >/dev/null; then
                break
            fi
            if [ "$attempt" = 5 ]; then
                echo "postgres.sh: the server did not start:" >&2
                tail -n 20 "$dir/server.log" >&2
                return 1
            fi
        done
        echo "$port" >"$dir/port"
        TETHER_POSTGRES_STARTED=1
    fi
    export TETHER_TEST_POSTGRES_URL="postgresql://postgres@127.0.0.1:$port/postgres"
}

# Stops the server, if it runs, and deletes its data.
postgres_stop() {
    local bin dir
    dir="$(postgres_dir)"
    [ -d "$dir" ] || return 0
    bin="$(postgres_bindir)" || return 1
    if [ -f "$dir/data/postmaster.pid" ]; then
        postgres_as "$bin/pg_ctl" stop -D "$dir/data" -m immediate -w >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    case "${1:-}" in
        start)
            postgres_start
            echo "export TETHER_TEST_POSTGRES_URL='$TETHER_TEST_POSTGRES_URL'"
            ;;
        stop) postgres_stop ;;
        *)
            sed -n '2,14p' "$0"
            exit 2
            ;;
    esac
fi
