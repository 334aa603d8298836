#!/usr/bin/env bash
# The image's base layer: a Debian root filesystem with Python 3.11 and nothing to build with,
# made by debootstrap (minbase) from the Debian mirror this machine's apt already uses, brought up
# to date from the same release's -updates and -security suites, then emptied of apt's lists,
# caches, documentation and this machine's names. Usage: rootfs.sh OUTPUT_TAR [WORK_DIR]
# Needs root (debootstrap and chroot). ATOLL_DEBIAN_MIRROR overrides the mirror read from apt.
set -euo pipefail
out=${1:?usage: rootfs.sh OUTPUT_TAR [WORK_DIR]}
work=${2:-${TMPDIR:-/tmp}/atoll-rootfs-build}
suite=bookworm                  # Debian 12: Python 3.11, the oldest Python Atoll supports
packages=python3,python3-venv   # the venv module with its bundled pip, removed again from the venv
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

die() { echo "rootfs.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root: debootstrap and chroot create files owned by other users"
[ -r "$keyring" ] || die "no $keyring to verify Debian's Release files: install debian-archive-keyring"
command -v apt-get > /dev/null || die "no apt-get: the mirror is read from apt's sources (or set ATOLL_DEBIAN_MIRROR)"

# The mirror of each suite, as apt's own sources name it (deb822 or one-line, whichever is used).
mirror_of() {
  apt-get indextargets --format '$(REPO_URI)' 'Identifier: Packages' "Codename: $1" 'Component: main' 'Target-Of: deb' 2> /dev/null | head -1
}
mirror=${ATOLL_DEBIAN_MIRROR:-$(mirror_of "$suite")}
[ -n "$mirror" ] || die "apt's sources have no Debian $suite main (run apt-get update, or set ATOLL_DEBIAN_MIRROR to a Debian mirror)"
updates=$(mirror_of "$suite-updates"); security=$(mirror_of "$suite-security")

rm -rf "$work"
mkdir -p "$work"
# debootstrap itself: the machine's, else Debian's package unpacked here (nothing is installed).
if command -v debootstrap > /dev/null; then
  debootstrap=(debootstrap)
else
  (cd "$work" && apt-get download -q debootstrap > /dev/null 2>&1) || die "debootstrap is not installed and apt-get download debootstrap failed"
  dpkg-deb -x "$work"/debootstrap_*.deb "$work/debootstrap"
  export DEBOOTSTRAP_DIR="$work/debootstrap/usr/share/debootstrap"
  debootstrap=("$work/debootstrap/usr/sbin/debootstrap")
fi
root="$work/rootfs"
"${debootstrap[@]}" --variant=minbase --include="$packages" --keyring="$keyring" "$suite" "$root" "$mirror" > "$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap $suite from $mirror failed (log above)"; }

# Security and point-release updates, in a mount namespace of its own (its /proc goes with it).
{
  echo "deb $mirror $suite main"
  [ -z "$updates" ] || echo "deb $updates $suite-updates main"
  [ -z "$security" ] || echo "deb $security $suite-security main"
} > "$root/etc/apt/sources.list"
cp /etc/resolv.conf "$root/etc/resolv.conf"
unshare --mount --fork sh -ec '
  mount -t proc proc "$1/proc"
  chroot "$1" env DEBIAN_FRONTEND=noninteractive sh -ec "apt-get -q update; apt-get -q -y upgrade; apt-get clean"
' sh "$root" > "$work/upgrade.log" 2>&1 || { tail -20 "$work/upgrade.log" >&2; die "apt-get upgrade in the new root failed (log above)"; }

# Nothing of the build or of this machine stays: no apt sources, lists or caches, no logs, no
# host name or resolver (the runtime provides both), no documentation or translations.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old "$root"/var/log/* \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* \
  "$root"/dev/* "$root"/proc/* "$root"/sys/* "$root"/tmp/* "$root"/run/* "$root"/root/.cache
: > "$root/etc/apt/sources.list"
: > "$root/etc/resolv.conf"
echo localhost > "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"

mkdir -p "$(dirname "$out")"
tar --sort=name --numeric-owner --format=posix --pax-option=delete=atime,delete=ctime -C "$root" -cf "$out.tmp" .
mv "$out.tmp" "$out"
rm -rf "$work"
