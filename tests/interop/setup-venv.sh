#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Creates (idempotently) a python venv at DIR with the PyPI varlink package
# the interop tests use: a varlink client nobody in this project wrote; and
# prometheus_client, whose text parser tests/integration/test_probes.py
# checks the metrics textfile with.
#   tests/interop/setup-venv.sh DIR
# Exit 0: DIR/bin/python imports varlink==$VARLINK_VERSION and
# prometheus_client==$PROMETHEUS_CLIENT_VERSION. Exit 77: no
# python3 venv support or no network to PyPI (the caller decides whether a
# skip is acceptable). Exit 1: anything else.
set -eu

VARLINK_VERSION=31.0.0
PROMETHEUS_CLIENT_VERSION=0.26.0

if [ $# -ne 1 ] || [ -z "$1" ]; then
        echo "usage: $0 DIR" >&2
        exit 2
fi
dir=$1
py=${PYTHON3:-python3}

have() {
        [ -x "$dir/bin/python" ] &&
                "$dir/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('varlink') != '$VARLINK_VERSION' or m.version('prometheus_client') != '$PROMETHEUS_CLIENT_VERSION')" 2>/dev/null
}

if have; then
        echo "venv $dir: varlink $VARLINK_VERSION, prometheus_client $PROMETHEUS_CLIENT_VERSION present"
        exit 0
fi

# Serialize concurrent setups of the same DIR (meson may run two programs).
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
if command -v flock >/dev/null 2>&1; then
        flock 9
fi
if have; then
        echo "venv $dir: varlink $VARLINK_VERSION, prometheus_client $PROMETHEUS_CLIENT_VERSION present"
        exit 0
fi

if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
        echo "SKIP: $py has no venv/ensurepip (apt-get install python3-venv)" >&2
        exit 77
fi

# A half-made venv (interrupted earlier) is rebuilt from scratch.
if [ -e "$dir" ] && ! [ -x "$dir/bin/python" ]; then
        rm -rf "$dir"
fi
if ! [ -x "$dir/bin/python" ]; then
        "$py" -m venv "$dir"
fi

log=$dir/pip.log
if ! "$dir/bin/python" -m pip install --disable-pip-version-check --no-input \
        --timeout 30 --retries 2 "varlink==$VARLINK_VERSION" \
        "prometheus_client==$PROMETHEUS_CLIENT_VERSION" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        if grep -qiE 'NewConnectionError|Temporary failure in name resolution|Network is unreachable|No matching distribution|ConnectTimeout|Max retries exceeded' "$log"; then
                echo "SKIP: cannot reach PyPI to install varlink==$VARLINK_VERSION prometheus_client==$PROMETHEUS_CLIENT_VERSION" >&2
                exit 77
        fi
        echo "pip install varlink==$VARLINK_VERSION prometheus_client==$PROMETHEUS_CLIENT_VERSION failed (log: $log)" >&2
        exit 1
fi

if ! have; then
        echo "varlink $VARLINK_VERSION or prometheus_client $PROMETHEUS_CLIENT_VERSION not importable from $dir after install" >&2
        exit 1
fi
echo "venv $dir: installed varlink $VARLINK_VERSION, prometheus_client $PROMETHEUS_CLIENT_VERSION"
