#!/usr/bin/env bash
# Build a current control plane for Atoll's tests from Go modules, verified by the Go checksum
# database: kube-apiserver, kube-scheduler and kube-controller-manager (k8s.io/kubernetes), etcd
# (go.etcd.io/etcd/server/v3), Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) and KWOK
# (sigs.k8s.io/kwok/cmd/kwok). Usage: build-control-plane.sh OUTPUT_DIR [WORK_DIR]
# The module code lives only in Go's module cache and WORK_DIR; nothing is written beside this file.
set -euo pipefail
out=${1:?usage: build-control-plane.sh OUTPUT_DIR [WORK_DIR]}
work=${2:-${TMPDIR:-/tmp}/atoll-control-plane-build}
# Kubernetes 1.36 is in Kueue v0.19's tested matrix, and Kueue v0.19.2 itself builds on the
# k8s.io/* v0.36.2 libraries, so both share one compiled set of them.
kube=v1.36.2 staging=v0.36.2
etcd=v3.6.8      # the etcd that k8s.io/kubernetes v1.36.2 requires
kueue=v0.19.2    # DESIGN.md's Kueue
kwok=v0.8.0
export GOFLAGS="-trimpath -mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
unset GONOSUMDB GOPRIVATE GOINSECURE GOWORK
if [ "$(go env GOSUMDB)" = off ]; then echo "GOSUMDB=off: the checksum database must verify these modules" >&2; exit 1; fi
go version
rm -rf "$work"
mkdir -p "$out" "$work/kube" "$work/etcd" "$work/bin"

# Kubernetes: a throwaway module requiring k8s.io/kubernetes, with its staging modules replaced by
# their published versions (the repository replaces them with ./staging paths, which a module
# dependency cannot use).
cd "$work/kube"
moddir=$(go mod download -json "k8s.io/kubernetes@$kube" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
{
  echo "module atoll.local/controlplane"
  echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/').0"
  echo "require k8s.io/kubernetes $kube"
  echo "replace ("
  sed -n 's#^\t\(k8s\.io/[a-z0-9-]*\) => \./staging/src/k8s\.io/[a-z0-9-]*$#\t\1 => \1 '"$staging"'#p' "$moddir/go.mod"
  echo ")"
} > go.mod
grep -q "k8s.io/api => k8s.io/api $staging" go.mod || { echo "no staging replaces read from $moddir/go.mod" >&2; exit 1; }
pkg=k8s.io/component-base/version cgo=k8s.io/client-go/pkg/version
major=${kube#v}; major=${major%%.*}; minor=${kube#v*.}; minor=${minor%%.*}
ldflags="-s -w"
for p in $pkg $cgo; do
  ldflags+=" -X $p.gitVersion=$kube -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  ldflags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done
go build -ldflags "$ldflags" -o "$work/bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager

# etcd: its server module pins its siblings with ../ replaces; require them at the same version.
cd "$work/etcd"
cat > go.mod <<EOF
module atoll.local/etcd
go 1.24.0
require (
	go.etcd.io/etcd/server/v3 $etcd
	go.etcd.io/etcd/api/v3 $etcd
	go.etcd.io/etcd/client/pkg/v3 $etcd
	go.etcd.io/etcd/client/v3 $etcd
	go.etcd.io/etcd/pkg/v3 $etcd
)
EOF
go build -ldflags "-s -w" -o "$work/bin/etcd" go.etcd.io/etcd/server/v3

# Kueue and KWOK have no replace directives: `go install module@version` builds them exactly as pinned.
for m in "sigs.k8s.io/kueue/cmd/kueue@$kueue" "sigs.k8s.io/kwok/cmd/kwok@$kwok"; do
  GOFLAGS=-trimpath GOBIN="$work/bin" go install -ldflags "-s -w" "$m"
done

for b in kube-apiserver kube-scheduler kube-controller-manager etcd kueue kwok; do
  install -m 0755 "$work/bin/$b" "$out/$b.tmp"
  mv "$out/$b.tmp" "$out/$b"
done
"$out/kube-apiserver" --version
"$out/etcd" --version | head -1
