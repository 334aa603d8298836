#!/usr/bin/env bash
# Atoll's OCI image, built without a Docker engine: the Debian base layer of rootfs.sh, and a layer
# holding Atoll's wheel and its dependencies (at the versions constraints.txt pins) in
# /opt/atoll/venv with numba's kernels compiled into /opt/atoll/numba-cache (what the Dockerfile's
# stages make), assembled into an OCI image layout by
# umoci. umoci and runc (to run the image) are built from their Go modules, verified by the Go
# checksum database. Everything is kept in Atoll's cache ($ATOLL_CACHE_DIR, else
# ${XDG_CACHE_HOME:-~/.cache}/atoll) under image/, each part stamped with the digest of what made
# it, so an unchanged tree reuses the image and a changed one rebuilds only what changed.
# Usage: build.sh          build (or reuse) the image; prints its layout, tag and size
#        build.sh tools    build (or reuse) umoci and runc only; prints their folder
# Needs root (debootstrap, chroot), Go 1.26 and a C compiler (runc), pip, and apt's Debian mirror.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
umoci_version=v0.6.0
runc_version=v1.5.2
python=${PYTHON:-python3}
cache=${ATOLL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/atoll}/image
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml")
# What the Dockerfile copies: the package's sources, its bundled config, and its metadata.
sources=(pyproject.toml README.md admission topology policies config)

die() { echo "build.sh: $*" >&2; exit 1; }
[ -n "$version" ] || die "no version in $repo/pyproject.toml"
digest() { sha256sum | cut -c1-64; }
stamped() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
clock=$(date +%s) start=$(date +%s)
lap() { local now; now=$(date +%s); echo "build.sh: $1 in $(( now - clock )) s" >&2; clock=$now; }
mkdir -p "$cache"
exec 9> "$cache/lock"
flock 9  # one build at a time; a second waiter then finds the first one's result

# ------------------------------------------------------------------ tools: umoci and runc from Go
tools_key=$(echo "umoci $umoci_version runc $runc_version $(go env GOVERSION 2> /dev/null)" | digest)
build_tools() {
  command -v go > /dev/null || die "no go on PATH to build umoci and runc"
  [ "$(go env GOSUMDB)" != off ] || die "GOSUMDB=off: the checksum database must verify umoci and runc"
  local work
  work=$(mktemp -d "${TMPDIR:-/tmp}/atoll-image-tools.XXXXXX")
  export GOTOOLCHAIN=local GOFLAGS="-trimpath -mod=mod"
  unset GONOSUMDB GOPRIVATE GOINSECURE GOWORK
  # umoci's go.mod replaces one dependency, which `go install module@version` refuses: build it
  # from a throwaway module that requires it and repeats its replace lines.
  local dir
  dir=$(cd "$work" && go mod download -json "github.com/opencontainers/umoci@$umoci_version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || die "go mod download github.com/opencontainers/umoci@$umoci_version failed"
  { echo "module atoll.local/imagetools"; echo "go 1.26.0"; echo "require github.com/opencontainers/umoci $umoci_version"
    grep '^replace ' "$dir/go.mod" || true; } > "$work/go.mod"
  (cd "$work" && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$work/bin/umoci" github.com/opencontainers/umoci/cmd/umoci)
  # runc needs cgo (its nsenter is C); built without seccomp, which needs libseccomp's headers.
  (cd "$work" && CGO_ENABLED=1 GOBIN="$work/bin" GOFLAGS=-trimpath go install -ldflags "-s -w" "github.com/opencontainers/runc@$runc_version")
  mkdir -p "$cache/tools"
  for b in umoci runc; do install -m 0755 "$work/bin/$b" "$cache/tools/$b.tmp"; mv "$cache/tools/$b.tmp" "$cache/tools/$b"; done
  echo "$tools_key" > "$cache/tools/stamp"
  rm -rf "$work"
}
stamped "$cache/tools/stamp" "$tools_key" || { build_tools; lap "built umoci and runc"; }
umoci="$cache/tools/umoci"
if [ "${1:-}" = tools ]; then echo "$cache/tools"; exit 0; fi
[ "$(id -u)" = 0 ] || die "needs root: debootstrap and chroot create files owned by other users"

# ------------------------------------------------------------------ the Debian base layer
base_key=$(digest < "$here/rootfs.sh")
if ! stamped "$cache/base/stamp" "$base_key"; then
  echo "build.sh: building the Debian base layer (rootfs.sh)" >&2
  "$here/rootfs.sh" "$cache/base/rootfs.tar"
  echo "$base_key" > "$cache/base/stamp"
  lap "built the Debian base layer"
fi

# ------------------------------------------------------------------ Atoll's layer, then the image
source_key=$(cd "$repo" && find "${sources[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z \
  | xargs -0 sha256sum | digest)
image_key=$(printf '%s\n' "$(digest < "$0")" "$(digest < "$here/constraints.txt")" "$base_key" "$tools_key" "$source_key" | digest)
layout="$cache/oci"
if stamped "$cache/oci.stamp" "$image_key" && [ -f "$layout/index.json" ]; then
  echo "build.sh: reusing the image (its stamp matches this tree)" >&2
else
  rm -f "$cache/oci.stamp"
  work=$(mktemp -d "${TMPDIR:-/tmp}/atoll-image.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/src"
  (cd "$repo" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - "${sources[@]}") | tar -xf - -C "$work/src"
  "$python" -m pip wheel -q --disable-pip-version-check --constraint "$here/constraints.txt" --wheel-dir "$work/wheels" \
    "$work/src" > "$work/pip.log" 2>&1 \
    || { tail -20 "$work/pip.log" >&2; die "pip wheel of Atoll and its dependencies failed (log above)"; }
  lap "built the wheels"
  root="$work/rootfs"
  mkdir -p "$root"
  tar --numeric-owner -xf "$cache/base/rootfs.tar" -C "$root"
  touch "$work/marker"
  sleep 1  # whatever the chroot changes is newer than the marker
  cp -r "$work/wheels" "$root/tmp/atoll-wheels"
  cp -r "$work/src/config" "$root/tmp/atoll-config"
  # Install, compile, warm numba's cache (every example workload on every bundled cluster, as
  # the Dockerfile does: the kernels get compiled for the argument types the controller uses),
  # and add the unprivileged user; in a private mount namespace whose /proc and /dev go away with it.
  unshare --mount --propagation private --fork sh -ec '
    mount -t proc proc "$1/proc"
    mount --rbind /dev "$1/dev"
    exec chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PYTHONDONTWRITEBYTECODE=1 sh -ec "
      python3 -m venv /opt/atoll/venv
      /opt/atoll/venv/bin/pip install -q --no-index --no-compile --disable-pip-version-check --find-links /tmp/atoll-wheels atoll
      /opt/atoll/venv/bin/python -m pip uninstall -q -y pip setuptools
      /opt/atoll/venv/bin/python -m compileall -q /opt/atoll/venv/lib
      for cluster in /tmp/atoll-config/clusters/*.yaml; do
        for workload in /tmp/atoll-config/workloads/*.yaml; do
          NUMBA_CACHE_DIR=/opt/atoll/numba-cache /opt/atoll/venv/bin/atoll place --cluster \$cluster --workload \$workload \
            --profiles /tmp/atoll-config/profiles.yaml --format json > /dev/null || true
        done
      done
      test -n \"\$(find /opt/atoll/numba-cache -name \*.nbi -print -quit)\" || { echo numba cache is empty >&2; exit 1; }
      groupadd --gid 65532 atoll
      useradd --uid 65532 --gid 65532 --no-create-home --home-dir /scratch --shell /usr/sbin/nologin atoll
      mkdir -p /scratch
      rm -rf /tmp/atoll-wheels /tmp/atoll-config /root/.cache
    "
  ' sh "$root" > "$work/install.log" 2>&1 || { tail -30 "$work/install.log" >&2; die "installing Atoll into the image failed (log above)"; }
  lap "installed Atoll and compiled its kernels"
  # Atoll's layer: what the install made or changed (the base layer is never edited, so there is
  # nothing to white out).
  (cd "$root" && find . -newer "$work/marker" ! -path . ! -path './dev/*' ! -path './proc/*' ! -path './tmp/*' | LC_ALL=C sort) > "$work/layer.list"
  tar --no-recursion --numeric-owner --format=posix --pax-option=delete=atime,delete=ctime -C "$root" -cf "$work/atoll.tar" -T "$work/layer.list"
  rm -rf "$root"

  oci="$work/oci"
  "$umoci" init --layout "$oci"
  "$umoci" new --image "$oci:$version"
  "$umoci" raw add-layer --compress gzip --image "$oci:$version" \
    --history.created_by "debootstrap --variant=minbase bookworm, python3 (helm/image/rootfs.sh)" "$cache/base/rootfs.tar"
  "$umoci" raw add-layer --compress gzip --image "$oci:$version" \
    --history.created_by "atoll $version in /opt/atoll/venv, numba kernels in /opt/atoll/numba-cache (helm/image/build.sh)" "$work/atoll.tar"
  # The Dockerfile's runtime stage: non-root, its venv first on PATH, numba's cache on the
  # writable scratch volume the chart mounts, `atoll run` by default.
  "$umoci" config --image "$oci:$version" --no-history \
    --config.user 65532:65532 --config.workingdir /scratch \
    --config.entrypoint atoll --config.cmd run \
    --config.env PATH=/opt/atoll/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env NUMBA_CACHE_DIR=/scratch/numba-cache --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 \
    --config.exposedports 8080/tcp --config.exposedports 8081/tcp --config.exposedports 9443/tcp \
    --config.label org.opencontainers.image.title=atoll --config.label "org.opencontainers.image.version=$version"
  "$umoci" gc --layout "$oci"
  rm -rf "$layout"
  mv "$oci" "$layout"
  echo "$image_key" > "$cache/oci.stamp"
  lap "assembled the layout"
  echo "build.sh: built in $(( $(date +%s) - start )) s" >&2
fi
size=$(du -sb "$layout/blobs" | cut -f1)
echo "$layout:$version ($(( size / 1000000 )) MB compressed)"
