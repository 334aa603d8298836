#!/usr/bin/env bash
# Build a real kube-apiserver (v1.20.2) from Debian's `kubernetes` source package with Debian's Go,
# for Atoll's integration tests. Usage: build-kube-apiserver.sh OUTPUT_DIR [WORK_DIR]
# Needs root (apt-get). Reaches only the machine's configured Debian mirror. Takes ~7 min on 2 cores.
set -euo pipefail
out=${1:?usage: build-kube-apiserver.sh OUTPUT_DIR [WORK_DIR]}
work=${2:-${TMPDIR:-/tmp}/atoll-kube-apiserver-build}
version=1.20.5+really1.20.2-1.1+deb12u1
mkdir -p "$out" "$work/apt/lists/partial" "$work/apt/sources.list.d" "$work/src"
cd "$work"
export DEBIAN_FRONTEND=noninteractive
# a fresh machine has no package lists yet
apt-get update -q >/dev/null
apt-get install -y -q golang-go etcd-server rsync golang-github-modern-go-reflect2-dev >/dev/null
# Kubernetes 1.20 builds with Debian's Go 1.19 only: pin it ahead of any newer Go on PATH, and never
# let a go.mod toolchain line fetch another.
export PATH=/usr/lib/go-1.19/bin:$PATH GOTOOLCHAIN=local
go version | grep -q 'go1\.19' || { echo "Debian's Go 1.19 is not first on PATH: $(go version)" >&2; exit 1; }
# deb-src entries from the machine's own sources, through a private apt config (system config untouched)
sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > apt/sources.list.d/debian.sources
private=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$work/apt/sources.list.d" -o Dir::State::Lists="$work/apt/lists")
apt-get "${private[@]}" update -q >/dev/null
(cd src && apt-get "${private[@]}" source --download-only "kubernetes=$version" >/dev/null 2>&1)
rm -rf kubernetes-1.20.2
tar xzf src/kubernetes_1.20.5+really1.20.2.orig.tar.gz
cd kubernetes-1.20.2
# The vendored reflect2 1.0.1 crashes under Go >= 1.18 on the first custom-object create; use Debian's 1.0.2.
rm -rf vendor/github.com/modern-go/reflect2
cp -rL /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
rm -f vendor/github.com/modern-go/reflect2/go.mod
# Under Go >= 1.19 the vendored OpenAPI type validator sees every empty string as null (reflect.Zero and an
# interface holding "" now share one address), so a CRD object with `message: ""` fails with
# 'Invalid value: "null"'. Only a nil value is null (as in later kube-openapi).
for f in vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go vendor/github.com/go-openapi/validate/type.go; do
  grep -q 'if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {' "$f"
  sed -i 's/if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {/if data == nil {/' "$f"
done
cat > "$work/version.env" <<V
KUBE_GIT_COMMIT='faecb196815e248d3ecfb03c680a4507229c2a56'
KUBE_GIT_TREE_STATE='clean'
KUBE_GIT_VERSION='v1.20.2'
KUBE_GIT_MAJOR='1'
KUBE_GIT_MINOR='20'
V
HOME="$work/home" GOPROXY=off KUBE_GIT_VERSION_FILE="$work/version.env" make WHAT=cmd/kube-apiserver >"$work/make.log" 2>&1 \
  || { tail -40 "$work/make.log" >&2; exit 1; }
install -m 0755 _output/bin/kube-apiserver "$out/kube-apiserver.tmp"
mv "$out/kube-apiserver.tmp" "$out/kube-apiserver"
"$out/kube-apiserver" --version
