#!/usr/bin/env bash
# Build JobSet's controller (sigs.k8s.io/jobset, its main package at the module root) for Atoll's
# tests, verified by the Go checksum database. Usage: build-jobset.sh OUTPUT_DIR [WORK_DIR]
# A recipe of its own, stamped apart from build-control-plane.sh's, so adding or changing it
# rebuilds JobSet alone, never the programs already in the cache.
# The module code lives only in Go's module cache and WORK_DIR; nothing is written beside this file.
set -euo pipefail
out=${1:?usage: build-jobset.sh OUTPUT_DIR [WORK_DIR]}
work=${2:-${TMPDIR:-/tmp}/atoll-jobset-build}
# The JobSet that Kueue v0.19.2's go.mod requires, and so the one its own e2e tests install.
jobset=v0.12.0
kueue=v0.19.2
export GOFLAGS="-trimpath -mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
unset GONOSUMDB GONOSUMCHECK GOPRIVATE GOINSECURE GOWORK
if [ "$(go env GOSUMDB)" = off ]; then echo "GOSUMDB=off: the checksum database must verify these modules" >&2; exit 1; fi
go version
rm -rf "$work"
mkdir -p "$out" "$work/jobset" "$work/bin"

# A throwaway module requiring JobSet beside the Kueue that requires it: the build list is then
# Kueue's own (k8s.io/* v0.36.2, controller-runtime v0.24.1, ...), which JobSet v0.12.0's go.mod
# is no newer than, so JobSet compiles against the libraries Kueue's build already compiled.
cd "$work/jobset"
{
  echo "module atoll.local/jobset"
  echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/').0"
  echo "require ("
  echo "	sigs.k8s.io/jobset $jobset"
  echo "	sigs.k8s.io/kueue $kueue"
  echo ")"
} > go.mod
got=$(go list -m -f '{{.Version}}' sigs.k8s.io/jobset)
[ "$got" = "$jobset" ] || { echo "the build list has sigs.k8s.io/jobset $got, not $jobset" >&2; exit 1; }
go build -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$jobset" -o "$work/bin/jobset" sigs.k8s.io/jobset

install -m 0755 "$work/bin/jobset" "$out/jobset.tmp"
mv "$out/jobset.tmp" "$out/jobset"
go version -m "$out/jobset" | sed -n '1p; /sigs.k8s.io\/jobset\|k8s.io\/api\t/p'
