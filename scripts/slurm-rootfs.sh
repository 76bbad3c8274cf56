#!/usr/bin/env bash
# Installs the Slurm version this host's packages do not carry into a Debian root filesystem, so the
# local cluster tooling can run both (trainguard.localstack.slurm_rootfs; `trainguard lab up --slurm`).
#   Debian 12 host (Slurm 22.05): Debian 13 "trixie" -> Slurm 24.11 in var/slurm-24.11/rootfs
#   Debian 13 host (Slurm 24.11): Debian 12 "bookworm" -> Slurm 22.05 in var/slurm-22.05/rootfs
# Override the directory with TG_LAB_SLURM_ROOTFS_24_11 / TG_LAB_SLURM_ROOTFS_22_05.
# Needs root, debootstrap and network access to the Debian mirror this host uses. Idempotent: a stamp
# file records a finished install; a second run only checks it. ~45 s and ~450 MB on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOTFS_PACKAGES=(slurmctld slurmd slurm-client munge slurmrestd slurm-wlm-jwt-plugin python3)

die() { echo "slurm-rootfs: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot)"
host=$(dpkg-query -W -f='${Version}' slurmctld 2>/dev/null | grep -oE '^[0-9]+\.[0-9]+' || true)
case "$host" in
  22.05) version=24.11 suite=trixie ;;
  24.11) version=22.05 suite=bookworm ;;
  "") die "the host's slurmctld package is not installed (scripts/bootstrap.sh installs it first)" ;;
  *) echo "slurm-rootfs: host Slurm is $host; only 22.05 and 24.11 are wired up, nothing to do"; exit 0 ;;
esac
var="TG_LAB_SLURM_ROOTFS_${version/./_}"
rootfs=${!var:-$PWD/var/slurm-$version/rootfs}
stamp=$rootfs/.trainguard-rootfs-ready

# A mount left inside the root filesystem would make `rm -rf` reach the host's /dev or /proc.
mounted_inside() { awk -v r="$(realpath -m "$1")/" 'index($5 "/", r) == 1 {found=1} END {exit !found}' \
  /proc/self/mountinfo; }

if [ -f "$stamp" ]; then
  if chroot "$rootfs" dpkg-query -W -f='${Status}\n' "${ROOTFS_PACKAGES[@]}" 2>/dev/null \
      | grep -qv "install ok installed"; then
    die "$rootfs is stamped ready but packages are missing; remove $rootfs and run again"
  fi
  echo "slurm-rootfs: Slurm $version ready in $rootfs ($(cat "$stamp"))"
  exit 0
fi

# The mirror this host already uses (deb822 sources first, then the one-line format);
# TG_DEBIAN_MIRROR overrides it.
mirror=${TG_DEBIAN_MIRROR:-}
[ -n "$mirror" ] || mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
if [ -z "$mirror" ]; then
  mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"

if [ ! -x "$rootfs/usr/bin/apt-get" ] || [ -d "$rootfs/debootstrap" ]; then
  # Absent or a half-finished debootstrap: start over in a temporary directory, then move it in place.
  tmp=$rootfs.partial
  for dir in "$rootfs" "$tmp"; do
    if [ -e "$dir" ]; then
      mounted_inside "$dir" && die "something is mounted under $dir; unmount it, then run again"
      rm -rf "$dir"
    fi
  done
  mkdir -p "$(dirname "$rootfs")"
  echo "slurm-rootfs: debootstrap $suite from $mirror into $rootfs (about 30 s)"
  debootstrap --variant=minbase "$suite" "$tmp" "$mirror" > "$tmp.log" 2>&1 \
    || die "debootstrap failed; last lines of $tmp.log:
$(tail -n 15 "$tmp.log")"
  mv "$tmp" "$rootfs"
  rm -f "$tmp.log"
fi

echo "slurm-rootfs: installing ${ROOTFS_PACKAGES[*]} inside $rootfs"
cp /etc/hosts "$rootfs/etc/hosts"
cp -L /etc/resolv.conf "$rootfs/etc/resolv.conf" 2>/dev/null || true
# Package scripts must not start the stock services (they would fail, or clash with ours).
printf '#!/bin/sh\nexit 101\n' > "$rootfs/usr/sbin/policy-rc.d"
chmod 755 "$rootfs/usr/sbin/policy-rc.d"
log=$rootfs/../apt-install.log
# /proc, /sys and /dev are bound in a private mount namespace that vanishes with the install.
if ! unshare --mount --propagation unchanged -- /bin/sh -ec '
    R=$1; shift
    if ! mount --make-rprivate / 2>/dev/null && grep -q " shared:" /proc/self/mountinfo; then
      echo "cannot make the mount namespace private" >&2; exit 1
    fi
    mount --bind /proc "$R/proc"; mount --rbind /sys "$R/sys"; mount --rbind /dev "$R/dev"
    export DEBIAN_FRONTEND=noninteractive
    chroot "$R" apt-get update -q
    chroot "$R" apt-get install -y -q --no-install-recommends "$@"
  ' sh "$rootfs" "${ROOTFS_PACKAGES[@]}" > "$log" 2>&1; then
  die "installing packages in $rootfs failed; last lines of $log:
$(tail -n 15 "$log")"
fi
installed=$(chroot "$rootfs" dpkg-query -W -f='${Version}' slurmctld)
case "$installed" in
  "$version".*) ;;
  *) die "expected Slurm $version in $rootfs, got slurmctld $installed" ;;
esac
echo "slurmctld $installed ($suite, $(date -u +%Y-%m-%dT%H:%MZ))" > "$stamp"
echo "slurm-rootfs: Slurm $installed ready in $rootfs"
