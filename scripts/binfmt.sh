#!/usr/bin/env bash
# Emulation of another CPU for image builds: the kernel runs aarch64 (or
# x86_64) programs through QEMU, so that `debootstrap --arch` and `docker
# build` of another platform's image work on this machine
# (scripts/publish-images.sh builds linux/arm64 on amd64 runners this way).
#
#   binfmt.sh ensure PLATFORM...   exit 0 when each PLATFORM (linux/amd64,
#                                  linux/arm64) is this machine's own or its
#                                  QEMU is registered with the F flag; else,
#                                  where we may (root, and CI=true or
#                                  INSTALL_PACKAGES=1), mount binfmt_misc,
#                                  install Debian's qemu-user-static and
#                                  binfmt-support and register it; else exit 1
#                                  saying what is missing.
#
# The F (fix binary) flag makes the kernel open the interpreter when it is
# registered, so that it works inside containers and chroots, which do not
# have it in their file system. binfmt_misc is the kernel's, not the
# container's: registering it in a privileged CI job registers it on the
# runner's host, as docker/binfmt-style images do.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BINFMT=/proc/sys/fs/binfmt_misc

machine_of() { # platform -> the kernel's machine name (uname -m)
  case "$1" in
    linux/amd64) echo x86_64 ;;
    linux/arm64) echo aarch64 ;;
    *) die "binfmt: unknown platform '$1': choose linux/amd64 or linux/arm64" ;;
  esac
}

# registered MACHINE: its QEMU entry is there, enabled and has the F flag.
registered() {
  local entry="$BINFMT/qemu-$1"
  [[ -r "$entry" ]] && grep -qx enabled "$entry" && grep -q '^flags: .*F' "$entry"
}

# register MACHINE: as root, binfmt_misc mounted, QEMU installed and its
# Debian format (fix-binary) imported.
register() {
  local machine="$1" entry="$BINFMT/qemu-$1"
  if [[ -e "$entry" ]]; then
    # Someone registered it without F (the host's own binfmt-support, say):
    # replacing a registration of the host's is theirs to decide.
    die "binfmt: qemu-$machine is registered on this kernel ($(tr '\n' ' ' <"$entry")) but not enabled with the F flag, so containers cannot use it: register it with F (Debian's qemu-user-static does) or remove it ('echo -1 > $entry' as root)"
  fi
  may_install_packages ||
    die "binfmt: no QEMU for $machine is registered on this kernel: installing Debian's (or Ubuntu's) qemu-user-static and binfmt-support as root registers it, or run this again as root with INSTALL_PACKAGES=1"
  if ! mountpoint -q "$BINFMT"; then
    log "binfmt: mounting binfmt_misc on $BINFMT"
    mount -t binfmt_misc binfmt_misc "$BINFMT" || die "binfmt: cannot mount binfmt_misc on $BINFMT (a privileged runner can)"
  fi
  registered "$machine" && return 0 # the mount showed the host's registration
  command -v update-binfmts >/dev/null && [[ -e "/usr/share/binfmts/qemu-$machine" ]] ||
    apt_install "QEMU emulates $machine for image builds" qemu-user-static binfmt-support
  # The packages' own scripts register it when binfmt_misc was mounted; this
  # does it when they were installed before the mount.
  registered "$machine" || update-binfmts --enable "qemu-$machine" || true
  registered "$machine" || die "binfmt: qemu-$machine is still not registered with the F flag after installing qemu-user-static ($(cat "$entry" 2>/dev/null | tr '\n' ' '))"
  log "binfmt: qemu-$machine registered ($(sed -n 's/^interpreter //p' "$entry"), flags $(sed -n 's/^flags: //p' "$entry"))"
}

cmd_ensure() {
  (($#)) || die "usage: $0 ensure PLATFORM..."
  local platform machine here
  here="$(uname -m)"
  for platform in "$@"; do
    machine="$(machine_of "$platform")"
    [[ "$machine" == "$here" ]] && continue
    registered "$machine" || register "$machine"
  done
}

case "${1:-}" in
  ensure) shift; cmd_ensure "$@" ;;
  *) die "usage: $0 ensure PLATFORM..." ;;
esac
