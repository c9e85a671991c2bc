#!/usr/bin/env bash
# Throwaway PostgreSQL for Keel's tests and benchmarks.
#
#   source scripts/postgres.sh         # provision (unless KEEL_TEST_POSTGRES_URL is set),
#                                      # export KEEL_TEST_POSTGRES_URL; the cluster is
#                                      # stopped and deleted when the sourcing shell exits
#   scripts/postgres.sh -- CMD ARGS    # run one command against a throwaway cluster
#   scripts/postgres.sh --shell        # an interactive shell with the URL exported
#
# When KEEL_TEST_POSTGRES_URL is already set, nothing is provisioned and that database is
# used. Otherwise: install Debian's `postgresql` package if initdb/pg_ctl are missing, create
# a cluster in a temp dir owned by the `postgres` user (initdb refuses root), start it on
# 127.0.0.1 with a free port, create database `keel_test`, export its URL. Quiet unless it
# fails (then the server log is printed). Needs no stdin; works under CI=true.

_keel_pg_main() {
    local mode="${1:-}"
    if [[ -n "${KEEL_TEST_POSTGRES_URL:-}" ]]; then
        return 0
    fi

    local bindir
    bindir="$(_keel_pg_bindir)" || {
        _keel_pg_install || return 1
        bindir="$(_keel_pg_bindir)" || {
            echo "postgres.sh: initdb/pg_ctl not found even after installing postgresql" >&2
            return 1
        }
    }

    local run_as=()
    if [[ "$(id -u)" == 0 ]]; then
        if ! id postgres >/dev/null 2>&1; then
            useradd --system --no-create-home --shell /usr/sbin/nologin postgres
        fi
        run_as=(runuser -u postgres --)
    fi

    local dir
    dir="$(mktemp -d "${TMPDIR:-/tmp}/keel-pg.XXXXXX")"
    [[ "${#run_as[@]}" -gt 0 ]] && chown postgres: "$dir"
    chmod 700 "$dir"

    local port
    port="$(_keel_pg_free_port)"

    if ! "${run_as[@]}" "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust \
        -E UTF8 --no-locale --no-sync >"$dir/initdb.log" 2>&1; then
        echo "postgres.sh: initdb failed:" >&2
        cat "$dir/initdb.log" >&2
        rm -rf "$dir"
        return 1
    fi
    if ! "${run_as[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c max_connections=200" \
        start >/dev/null 2>&1; then
        echo "postgres.sh: the server did not start:" >&2
        cat "$dir/server.log" >&2
        rm -rf "$dir"
        return 1
    fi
    _KEEL_PG_DIR="$dir"
    _KEEL_PG_BINDIR="$bindir"
    _KEEL_PG_RUN_AS=("${run_as[@]}")
    trap _keel_pg_stop EXIT

    if ! "${run_as[@]}" "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres keel_test \
        >"$dir/createdb.log" 2>&1; then
        echo "postgres.sh: createdb failed:" >&2
        cat "$dir/createdb.log" >&2
        return 1
    fi
    export KEEL_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/keel_test"
    echo "postgres.sh: throwaway PostgreSQL at $KEEL_TEST_POSTGRES_URL" >&2
}

_keel_pg_stop() {
    if [[ -n "${_KEEL_PG_DIR:-}" && -d "$_KEEL_PG_DIR" ]]; then
        "${_KEEL_PG_RUN_AS[@]}" "$_KEEL_PG_BINDIR/pg_ctl" -D "$_KEEL_PG_DIR/data" -m immediate \
            -w stop >/dev/null 2>&1 || true
        rm -rf "$_KEEL_PG_DIR"
    fi
    _KEEL_PG_DIR=""
}

# The directory holding initdb and pg_ctl: PATH first, then Debian's versioned dirs (newest).
_keel_pg_bindir() {
    local initdb
    if initdb="$(command -v initdb)" && command -v pg_ctl >/dev/null; then
        dirname "$(readlink -f "$initdb")"
        return 0
    fi
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

_keel_pg_install() {
    if [[ "$(id -u)" != 0 ]]; then
        echo "postgres.sh: PostgreSQL is not installed and this is not root; install the" \
            "postgresql package or set KEEL_TEST_POSTGRES_URL" >&2
        return 1
    fi
    echo "postgres.sh: installing Debian's postgresql package" >&2
    # Keep the package from creating and starting its own cluster: we make our own.
    mkdir -p /etc/postgresql-common
    if [[ ! -e /etc/postgresql-common/createcluster.conf ]]; then
        echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql; } \
        </dev/null >/tmp/keel-pg-install.log 2>&1; then
        echo "postgres.sh: apt-get install postgresql failed:" >&2
        tail -n 30 /tmp/keel-pg-install.log >&2
        return 1
    fi
}

# A TCP port nobody listens on (probing with bash's /dev/tcp, no extra tools needed).
_keel_pg_free_port() {
    local port
    for _ in $(seq 1 100); do
        port=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    echo 55432
}

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    # Sourced: provision into the caller's shell; the caller's EXIT cleans up.
    _keel_pg_main
else
    set -euo pipefail
    case "${1:-}" in
        --shell)
            _keel_pg_main
            echo "postgres.sh: KEEL_TEST_POSTGRES_URL=$KEEL_TEST_POSTGRES_URL; exit the shell to stop it" >&2
            "${SHELL:-bash}" || true
            ;;
        --)
            shift
            _keel_pg_main
            status=0
            "$@" || status=$?
            exit "$status"
            ;;
        *)
            echo "usage: source scripts/postgres.sh | scripts/postgres.sh --shell | scripts/postgres.sh -- CMD [ARGS]" >&2
            exit 2
            ;;
    esac
fi
