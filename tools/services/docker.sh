#!/usr/bin/env bash
# A private Docker daemon for the container test (sidecar/tests/deploy/container.rs).
#
#   tools/services/docker.sh start   install docker.io if missing, start dockerd;
#                                    prints the `export` lines a caller evals
#   tools/services/docker.sh stop    remove its containers, stop it, delete its state
#
# Both are idempotent. The daemon keeps everything under one directory
# ($TETHER_DOCKER_DIR, default /tmp/tether-docker-<hash of this checkout's
# path>: one per checkout, and short, since the Unix sockets inside must stay
# under 108 bytes): its own data and exec roots, pidfile and socket, so it
# touches no other daemon. With --bridge=none and --iptables=false it changes
# nothing on the host's network: containers have none unless run with
# --network host. No image registry is needed or reached; the test builds its
# base image from files on this machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

dir="${TETHER_DOCKER_DIR:-/tmp/tether-docker-$(printf %s "$PWD" | sha256sum | cut -c1-12)}"
sock="$dir/sock"
# Debian's docker 20.10 CLI: its `build` speaks BuildKit to the daemon without
# buildx (the test needs BuildKit to skip the Dockerfile's compile stage).
cli=/usr/bin/docker

say() { echo "docker.sh: $*" >&2; }

running() {
    [[ -f "$dir/pid" ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null \
        && DOCKER_HOST="unix://$sock" "$cli" info >/dev/null 2>&1
}

install() {
    if command -v dockerd >/dev/null 2>&1 && [[ -x "$cli" ]]; then
        return
    fi
    if [[ $(id -u) -ne 0 ]]; then
        say "docker.io is not installed and this is not root: run \`apt-get install docker.io\` as root"
        exit 1
    fi
    say "installing docker.io"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
}

start() {
    install
    if ! running; then
        stop_daemon
        mkdir -p "$dir"
        say "starting dockerd in $dir"
        # setsid: the daemon is not in the caller's process group, so a ^C to
        # the test run reaches cargo, and `stop` ends the daemon in order.
        setsid dockerd --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/pid" \
            -H "unix://$sock" --iptables=false --ip-forward=false --bridge=none \
            >"$dir/dockerd.log" 2>&1 </dev/null &
        for _ in $(seq 300); do
            running && break
            sleep 0.1
        done
        if ! running; then
            say "dockerd did not start; its log:"
            tail -n 20 "$dir/dockerd.log" >&2
            exit 1
        fi
    fi
    echo "export DOCKER_HOST=unix://$sock"
    echo "export TETHER_DOCKER=$cli"
}

# Stops the daemon in the order that leaves nothing behind: its containers,
# then the daemon by its own PID, then its network namespace mount.
stop_daemon() {
    if [[ -S "$sock" ]]; then
        local ids
        ids=$(DOCKER_HOST="unix://$sock" "$cli" ps -aq 2>/dev/null || true)
        if [[ -n "$ids" ]]; then
            # shellcheck disable=SC2086
            DOCKER_HOST="unix://$sock" "$cli" rm -f $ids >/dev/null 2>&1 || true
        fi
    fi
    if [[ -f "$dir/pid" ]]; then
        local pid
        pid=$(cat "$dir/pid")
        # Only the daemon this pidfile names: a stale pid may be reused.
        if [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == */dockerd ]] && kill "$pid" 2>/dev/null; then
            for _ in $(seq 300); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
        fi
        rm -f "$dir/pid"
    fi
    if mountpoint -q "$dir/exec/netns/default" 2>/dev/null; then
        umount "$dir/exec/netns/default"
    fi
}

case "${1:-}" in
    start) start ;;
    stop)
        stop_daemon
        rm -rf "$dir"
        ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
esac
