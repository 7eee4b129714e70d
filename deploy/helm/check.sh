#!/usr/bin/env bash
# Offline validation of the Helm chart (run by `make deploy-check` and CI).
#
#   1. builds Helm v3 and kubeconform with the machine's Go (cached outside the repo),
#   2. takes the Kubernetes JSON schemas of the oldest and the newest supported Kubernetes
#      version from the PyPI package kubernetes-validate and rewrites their relative $refs to
#      absolute file:// URLs (cached). Oldest = Chart.yaml's kubeVersion floor, newest = the
#      version this Helm assumes by default (client-go's, see k8s_version),
#   3. for each of the two versions: helm lint --strict --kube-version V and
#      helm template --kube-version V | kubeconform -strict -kubernetes-version V, for the
#      default values, values-production.yaml and testdata/all-optional.yaml,
#   4. expects the deliberately broken values file(s) in testdata/ to FAIL, a known-bad
#      manifest to fail kubeconform (so the schemas really are consulted), and the newest
#      version's rendering to fail the oldest version's schemas (so the version matters),
#   5. prints the kinds and counts of the rendered objects,
#   6. validates deploy/compose.yaml with compose-go (the library behind `docker compose
#      config`, built with Go, since this machine has no docker compose plugin), and expects a
#      broken override to fail.
#
# Nothing is fetched at validation time: kubeconform only sees file:// schemas.
# Environment: SESSION_CORE_CACHE (default ~/.cache/session-core), PYTHON (default python3),
# GO (default go).
set -euo pipefail

HELM_VERSION=v3.22.0
KUBECONFORM_VERSION=v0.8.0
COMPOSE_GO_VERSION=v2.16.2 # compose-spec/compose-go: the loader and schema docker compose v2 uses
K8S_VALIDATE_VERSION=1.37.0 # PyPI kubernetes-validate; ships schemas up to Kubernetes 1.37

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHART="$HERE/session-core"
CACHE="${SESSION_CORE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/session-core}"
BIN="$CACHE/bin"
PYTHON="${PYTHON:-python3}"
GO="${GO:-go}"
mkdir -p "$BIN"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'deploy-check: FAIL: %s\n' "$*" >&2; exit 1; }

oldest_k8s_version() { # Chart.yaml's kubeVersion ">=X.Y.Z-0" -> K8S_OLDEST=X.Y.Z
  local constraint
  constraint=$(awk -F'"' '/^kubeVersion:/ {print $2; exit}' "$CHART/Chart.yaml")
  [[ "$constraint" =~ ^\>=([0-9]+\.[0-9]+\.[0-9]+)(-0)?$ ]] ||
    die "Chart.yaml kubeVersion must be a plain '>=X.Y.Z-0' floor, got '$constraint'"
  K8S_OLDEST=${BASH_REMATCH[1]}
}

# --- 1. tools ---------------------------------------------------------------------------
modcache_dir() { # module@version -> its directory in the Go module cache (downloads it)
  "$GO" mod download -json "$1" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

go_install() { # DEST LDFLAGS MODULE/CMD@VERSION: a static, trimmed build of one command, as DEST
  local tmp
  tmp=$(mktemp -d)
  GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-buildvcs=false nice "$GO" install -trimpath -ldflags "$2" "$3"
  mv "$tmp/$(basename "${3%@*}")" "$1" && rmdir "$tmp"
}

k8s_version() { # Helm's Makefile: Kubernetes major = client-go major + 1, minor = client-go minor
  local dir client_go major minor
  dir=$(modcache_dir "helm.sh/helm/v3@$HELM_VERSION")
  client_go=$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$dir/go.mod")
  [[ -n "$client_go" ]] || die "cannot find k8s.io/client-go in $dir/go.mod"
  IFS=. read -r major minor _ <<<"${client_go#v}"
  K8S_VERSION="$((major + 1)).$minor.0"
}

build_helm() {
  HELM="$BIN/helm-$HELM_VERSION"
  [[ -x "$HELM" ]] && return 0
  log "building helm $HELM_VERSION with $("$GO" version | cut -d' ' -f3)"
  local major=${K8S_VERSION%%.*} minor
  minor=${K8S_VERSION#*.} && minor=${minor%%.*}
  local pkg=helm.sh/helm/v3
  # the same -X variables as Helm's Makefile (LDFLAGS) for a tagged release build
  local ldflags="-w -s -X $pkg/internal/version.version=$HELM_VERSION"
  ldflags+=" -X $pkg/internal/version.metadata= -X $pkg/internal/version.gitTreeState=clean"
  ldflags+=" -X $pkg/pkg/lint/rules.k8sVersionMajor=$major -X $pkg/pkg/lint/rules.k8sVersionMinor=$minor"
  ldflags+=" -X $pkg/pkg/chartutil.k8sVersionMajor=$major -X $pkg/pkg/chartutil.k8sVersionMinor=$minor"
  go_install "$HELM" "$ldflags" "$pkg/cmd/helm@$HELM_VERSION"
}

build_kubeconform() {
  KUBECONFORM="$BIN/kubeconform-$KUBECONFORM_VERSION"
  [[ -x "$KUBECONFORM" ]] && return 0
  log "building kubeconform $KUBECONFORM_VERSION"
  go_install "$KUBECONFORM" "-w -s -X main.version=$KUBECONFORM_VERSION" \
    "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
}

build_compose_validator() {
  COMPOSE_SPEC="$BIN/compose-spec-$COMPOSE_GO_VERSION"
  [[ -x "$COMPOSE_SPEC" ]] && return 0
  log "building the compose-spec validator (compose-go $COMPOSE_GO_VERSION)"
  go_install "$COMPOSE_SPEC" "-w -s" "github.com/compose-spec/compose-go/v2/cmd@$COMPOSE_GO_VERSION"
}

# deploy/compose.yaml must load under the Compose Specification (schema, interpolation,
# consistency: depends_on targets, anchors), and a broken override must not
check_compose() {
  local compose="$HERE/../compose.yaml" bad="$HERE/testdata/compose-broken.override.yaml"
  log "[compose] compose-spec validation of deploy/compose.yaml"
  # a clean environment, so nothing in the caller's shell changes the result
  env -i PATH=/usr/bin:/bin "$COMPOSE_SPEC" --format json "$compose" >"$OUT/compose.json" 2>"$OUT/compose.err" || {
    cat "$OUT/compose.err" >&2; die "deploy/compose.yaml is not a valid compose file"; }
  echo "  compose.yaml: valid; services: $("$PYTHON" -c 'import json,sys; print(" ".join(sorted(json.load(sys.stdin)["services"])))' <"$OUT/compose.json")"
  if env -i PATH=/usr/bin:/bin "$COMPOSE_SPEC" "$compose" "$bad" >/dev/null 2>"$OUT/compose-bad.err"; then
    die "testdata/compose-broken.override.yaml was accepted (it must fail)"
  fi
  echo "  refused as expected: $(head -c 300 "$OUT/compose-bad.err")"
}

# --- 2. schemas -------------------------------------------------------------------------
fetch_schemas() {
  SCHEMAS="$CACHE/kubernetes-validate-$K8S_VALIDATE_VERSION/schemas"
  local marker="$SCHEMAS/.rewritten-v$K8S_OLDEST-v$K8S_VERSION"
  [[ -f "$marker" ]] && return 0
  log "fetching kubernetes-validate $K8S_VALIDATE_VERSION schemas (PyPI) and rewriting \$refs"
  local root="$CACHE/kubernetes-validate-$K8S_VALIDATE_VERSION" whl
  rm -rf "$root" && mkdir -p "$root/dl"
  "$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check \
    --dest "$root/dl" "kubernetes-validate==$K8S_VALIDATE_VERSION"
  whl=$(ls "$root/dl"/kubernetes_validate-*.whl)
  "$PYTHON" "$HERE/rewrite_schemas.py" "$whl" "$SCHEMAS" "v$K8S_OLDEST" "v$K8S_VERSION"
  touch "$marker"
}

# --- 3. lint, template, validate ---------------------------------------------------------
KUBECONFORM_ARGS=()
kubeconform_args() { # VERSION: validate against that Kubernetes version's schemas
  KUBECONFORM_ARGS=(-strict -summary -kubernetes-version "$1"
    -schema-location "$SCHEMAS/{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json")
}

kind_counts() { # rendered YAML on stdin -> "Kind count" lines
  "$PYTHON" -c '
import collections, sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
c = collections.Counter(d["kind"] for d in docs)
for k in sorted(c): print(f"  {k:<26}{c[k]}")
print("  " + "total".ljust(26) + str(sum(c.values())))
'
}

# Custom resources without an upstream schema in kubernetes-validate (Prometheus Operator, KEDA,
# Strimzi): kubeconform skips exactly these kinds, and only the ones the chart renders.
CRD_KINDS=(monitoring.coreos.com/v1/ServiceMonitor monitoring.coreos.com/v1/PrometheusRule
  keda.sh/v1alpha1/ScaledObject kafka.strimzi.io/v1beta2/KafkaTopic)

# The image repository is the one value without a default (image.repository is required):
# every check renders with testdata/image.yaml, as `make image` users would set it.
BASE_VALUES=("$HERE/testdata/image.yaml")

# check_values NAME VALUES... -> for the oldest and the newest supported Kubernetes version:
# lints, renders (into $OUT/NAME-vX.Y.Z.yaml) and validates against that version's schemas
check_values() {
  local name=$1 && shift
  local version
  for version in "$K8S_OLDEST" "$K8S_VERSION"; do
    check_values_at "$version" "$name" "$@"
  done
  echo "  rendered objects ($name, Kubernetes $K8S_VERSION):"
  kind_counts <"$OUT/$name-v$K8S_VERSION.yaml" || die "cannot summarise $name"
}

check_values_at() { # VERSION NAME VALUES...
  local version=$1 name=$2 && shift 2
  local args=(--kube-version "$version")
  for f in "${BASE_VALUES[@]}" "$@"; do args+=(--values "$f"); done
  log "[$name] Kubernetes $version: helm lint --strict"
  "$HELM" lint --strict "$CHART" "${args[@]}" >"$OUT/$name.lint" 2>&1 || {
    cat "$OUT/$name.lint" >&2; die "helm lint failed for $name (Kubernetes $version)"; }
  log "[$name] Kubernetes $version: helm template | kubeconform -strict"
  name="$name-v$version"
  "$HELM" template session-core "$CHART" --namespace session-core "${args[@]}" \
    >"$OUT/$name.yaml" 2>"$OUT/$name.err" || { cat "$OUT/$name.err" >&2; die "helm template failed for $name"; }
  local skip=() n_sm=0 n crd kinds=()
  for crd in "${CRD_KINDS[@]}"; do
    n=$(grep -c "^kind: ${crd##*/}$" "$OUT/$name.yaml" || true)
    if ((n > 0)); then kinds+=("$crd") && n_sm=$((n_sm + n)); fi
  done
  if ((${#kinds[@]})); then skip=(-skip "$(IFS=,; echo "${kinds[*]}")"); fi
  local summary
  kubeconform_args "$version"
  summary=$("$KUBECONFORM" "${KUBECONFORM_ARGS[@]}" "${skip[@]}" "$OUT/$name.yaml") || {
    echo "$summary" >&2; die "kubeconform rejected the $name manifests"; }
  echo "  kubeconform (Kubernetes $version): $summary"
  [[ "$summary" == *"Invalid: 0, Errors: 0, Skipped: $n_sm"* ]] ||
    die "unexpected kubeconform summary for $name (expected exactly $n_sm skipped custom resources)"
}

expect_failure() { # NAME VALUES -> lint, template or kubeconform must refuse these values
  local name=$1 values=$2
  log "[$name] expecting failure"
  # errexit does not apply inside a condition, so check_values handles every error itself
  if (check_values "$name" "$values") >"$OUT/$name.out" 2>&1; then
    cat "$OUT/$name.out" >&2
    die "$values was accepted (it must fail)"
  fi
  echo "  refused as expected: $(grep -m1 'FAIL' "$OUT/$name.out")"
  grep -E "^- at |^Error|is invalid|additional properties" "$OUT/$name.out" | head -5 | sed 's/^/    /'
}

main() {
  command -v "$GO" >/dev/null || die "go not found"
  "$PYTHON" -c 'import yaml' 2>/dev/null || die "$PYTHON lacks PyYAML (pip install pyyaml)"
  k8s_version
  oldest_k8s_version
  build_helm
  build_kubeconform
  build_compose_validator
  fetch_schemas
  OUT=$(mktemp -d)
  trap 'rm -rf "$OUT"' EXIT

  local hv kv
  hv=$("$HELM" version --template '{{ .Version }}')
  [[ "$hv" == "$HELM_VERSION" ]] || die "helm version reports $hv, expected $HELM_VERSION"
  kv=$("$HELM" template probe "$HERE/testdata/capabilities-probe" | awk '/kubeVersion:/ {print $2}')
  [[ "$kv" == "v$K8S_VERSION" ]] || die "helm's default Kubernetes version is $kv, expected v$K8S_VERSION"
  echo "helm $hv (default Kubernetes $kv), kubeconform $("$KUBECONFORM" -v)," \
    "schemas kubernetes-validate $K8S_VALIDATE_VERSION;" \
    "supported Kubernetes $K8S_OLDEST (Chart.yaml kubeVersion) to $K8S_VERSION"
  local version
  for version in "$K8S_OLDEST" "$K8S_VERSION"; do
    [[ -d "$SCHEMAS/v$version-local-strict" ]] ||
      die "kubernetes-validate $K8S_VALIDATE_VERSION has no schemas for Kubernetes $version"
  done
  kubeconform_args "$K8S_VERSION"

  # the schemas must really be consulted: a misspelt field deep in a pod template fails
  if "$KUBECONFORM" "${KUBECONFORM_ARGS[@]}" "$HERE/testdata/invalid-deployment.yaml" >"$OUT/self.txt" 2>&1; then
    cat "$OUT/self.txt" >&2; die "kubeconform accepted testdata/invalid-deployment.yaml"
  fi
  grep -q "containers/0': additional properties 'imagePullPolicyy' not allowed" "$OUT/self.txt" || {
    cat "$OUT/self.txt" >&2; die "kubeconform failed testdata/invalid-deployment.yaml for another reason"; }
  echo "  kubeconform self-test: invalid-deployment.yaml rejected for its misspelt container field"

  # the version matters: what the chart renders for the newest version (preStop sleep action,
  # on by default from 1.30) is refused by the oldest version's schemas
  "$HELM" template session-core "$CHART" --kube-version "$K8S_VERSION" --values "${BASE_VALUES[0]}" \
    >"$OUT/newest.yaml" || die "helm template failed for Kubernetes $K8S_VERSION"
  kubeconform_args "$K8S_OLDEST"
  if "$KUBECONFORM" "${KUBECONFORM_ARGS[@]}" "$OUT/newest.yaml" >"$OUT/self-version.txt" 2>&1; then
    cat "$OUT/self-version.txt" >&2
    die "the Kubernetes $K8S_VERSION rendering passed the $K8S_OLDEST schemas (are they the same?)"
  fi
  grep -q "preStop': additional properties 'sleep' not allowed" "$OUT/self-version.txt" || {
    cat "$OUT/self-version.txt" >&2; die "the $K8S_VERSION rendering failed the $K8S_OLDEST schemas for another reason"; }
  echo "  version self-test: the Kubernetes $K8S_VERSION rendering (preStop sleep) is refused by the $K8S_OLDEST schemas"
  kubeconform_args "$K8S_VERSION"

  # without image.repository the chart refuses to render, and says how to get an image
  log "[no-image] expecting failure: image.repository is required"
  if "$HELM" template session-core "$CHART" >"$OUT/no-image.out" 2>&1; then
    die "the chart rendered without image.repository (it must be required)"
  fi
  grep -q "image.repository is required: build the image with \`make image\`" "$OUT/no-image.out" || {
    cat "$OUT/no-image.out" >&2; die "the chart failed without image.repository for another reason"; }
  echo "  refused as expected: $(grep -m1 -o 'image.repository is required[^(]*' "$OUT/no-image.out")"

  check_values default
  check_values production "$HERE/values-production.yaml"
  check_values all-optional "$HERE/testdata/all-optional.yaml"
  local broken
  for broken in "$HERE"/testdata/broken-*.yaml; do
    expect_failure "$(basename "$broken" .yaml)" "$broken"
  done
  check_compose
  echo "deploy-check: OK"
}

if [[ ${1:-} == tools ]]; then # only build what the tests need (Helm), for CI before `make test`
  command -v "$GO" >/dev/null || die "go not found"
  k8s_version
  build_helm
  echo "$HELM"
  exit 0
fi
main "$@"
