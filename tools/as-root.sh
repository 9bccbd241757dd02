# SPDX-License-Identifier: LGPL-2.1-or-later
# Sourced by the tools that need root (tools/check, tools/demo, ...), before
# anything else: as root it does nothing; otherwise it runs the same command
# again through sudo when there is one, or says how to run it as root. So
# the README's commands work alike as root (with or without sudo installed)
# and as a user with sudo.
if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
                exec sudo --preserve-env=CI,BUILD_DIR,DEMO_SECONDS,FUZZ_SECONDS,BLKMQD,BLKMQCTL -- "$(readlink -f "$0")" "$@"
        fi
        echo "$(basename "$0"): run as root (it installs packages, attaches loop devices and writes /sys);" \
                "there is no sudo here: su -c '$0 $*'" >&2
        exit 1
fi
