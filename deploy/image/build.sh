#!/usr/bin/env bash
# Build the session-core OCI image without a Docker daemon (run by `make image`).
#
#   1. wheels: every pinned dependency of requirements.lock (hashes checked) and the project's
#      own wheel, downloaded/built on this machine (PyPI is the only index used);
#   2. root file system: Debian bookworm from Debian packages (mmdebstrap, variant essential,
#      plus python3 and python3-venv), then inside it a venv at /opt/venv installed from the
#      wheels only (--no-index --require-hashes), pip/setuptools and python3-venv removed
#      again, user and group 10001, no apt, docs or caches. The same layout as deploy/Dockerfile
#      (/opt/venv, ENTRYPOINT session-core, USER 10001:10001, WORKDIR /tmp);
#   3. the image: buildah from scratch + that rootfs + the Dockerfile's config, committed as
#      $IMAGE in the local containers storage, and written as an OCI archive.
#
# No image registry is needed (none is reachable here). Output (in $OUT, default
# ~/.cache/session-core/image):
#   rootfs/                          the root file system (deploy/image/run.sh can chroot into it)
#   session-core-<version>.oci.tar   the OCI image archive (skopeo/podman load it)
#   build.txt                        image name, digest, sizes and build time
#
# REUSE_ROOTFS=1 skips steps 1 and 2 when $OUT/rootfs exists (iterating on step 3).
# Environment: IMAGE (default localhost/session-core:<version of pyproject.toml>),
# DEBIAN_MIRROR (default http://deb.debian.org/debian), OUT, SESSION_CORE_CACHE.
# Needs root (or fakeroot/unshare for mmdebstrap), mmdebstrap and buildah
# (apt-get install -y mmdebstrap buildah podman).
set -euo pipefail

STEP=image
# shellcheck source=deploy/image/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PYTHON="${PYTHON:-python3}"
if ! command -v mmdebstrap >/dev/null || ! command -v buildah >/dev/null; then
  # CI machines (Debian, root): the tools are Debian packages
  if [[ $EUID == 0 ]] && command -v apt-get >/dev/null; then
    log "installing mmdebstrap buildah podman (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      mmdebstrap buildah podman uidmap >/dev/null
  fi
fi
for tool in mmdebstrap buildah; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install -y mmdebstrap buildah podman)"
done
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/session-core-image.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

if [[ ${REUSE_ROOTFS:-} == 1 && -x $OUT/rootfs/opt/venv/bin/session-core ]]; then
  # iterate on the image step only: the root file system of the last build, as it is
  log "reusing the root file system of the last build ($OUT/rootfs)"
  tar -C "$OUT/rootfs" -cf "$WORK/rootfs.tar" .
else
# --- 1. wheels ---------------------------------------------------------------------------
log "wheels from deploy/image/requirements.lock (hashes required) and the project's wheel"
mkdir -p "$WORK/wheels"
"$PYTHON" -m pip download --quiet --disable-pip-version-check --require-hashes --no-deps \
  --only-binary :all: --python-version 3.11 --implementation cp --abi cp311 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform linux_x86_64 \
  --dest "$WORK/wheels" -r "$HERE/requirements.lock"
# the project itself: only pyproject.toml and its packages (what .dockerignore lets in)
mkdir -p "$WORK/src"
cp -a "$REPO/pyproject.toml" "$REPO/shared" "$REPO/services" "$REPO/runtimes" \
  "$REPO/scripted_model" "$REPO/demo" "$WORK/src/"
find "$WORK/src" -name __pycache__ -prune -exec rm -rf {} +
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$WORK/project" "$WORK/src"
cp "$HERE/requirements.lock" "$WORK/wheels/"

# --- 2. root file system ------------------------------------------------------------------
log "root file system: Debian bookworm (mmdebstrap) + python3 + a venv from the wheels"
cat >"$WORK/customize.sh" <<'HOOK'
#!/bin/sh
# mmdebstrap customize hook: $1 is the root file system; $WORK/wheels is copied in first
set -eu
R=$1
# a clean environment inside: nothing of the host's (PIP_*, proxies, paths) leaks in
in_root() { chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
in_root python3 -m venv /opt/venv
in_root /opt/venv/bin/pip install --quiet --disable-pip-version-check --no-cache-dir \
  --no-index --find-links /tmp/wheels --require-hashes --no-deps -r /tmp/wheels/requirements.lock
for whl in "$R"/tmp/project/*.whl; do
  in_root /opt/venv/bin/pip install --quiet --disable-pip-version-check --no-cache-dir \
    --no-index --no-deps "/tmp/project/${whl##*/}"
done
in_root /opt/venv/bin/pip check
in_root /opt/venv/bin/python -m compileall -q /opt/venv/lib
in_root /opt/venv/bin/pip uninstall --quiet -y pip setuptools
# python3-venv was needed only to make the venv (ensurepip): no pip in the image
in_root dpkg --purge python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl \
  python3-distutils python3-lib2to3
# perl comes only with usrmerge (the root is merged already; init-system-helpers' dependency
# on it is then unmet, harmless without apt): ~50 MB less
in_root dpkg --purge --force-depends usrmerge
in_root dpkg --purge libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl perl \
  libperl5.36 perl-modules-5.36 libgdbm-compat4
in_root groupadd --system --gid 10001 session-core
in_root useradd --system --uid 10001 --gid 10001 --no-create-home \
  --home-dir /nonexistent --shell /usr/sbin/nologin session-core
in_root /opt/venv/bin/session-core --help >/dev/null
rm -rf "$R/tmp/wheels" "$R/tmp/project" "$R"/var/cache/* "$R"/var/lib/apt/lists/* \
  "$R"/usr/share/doc/* "$R"/usr/share/man/* "$R"/usr/share/info/* "$R"/var/log/*
find "$R/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + || true
rm -rf "$R"/usr/lib/x86_64-linux-gnu/gconv "$R"/usr/lib/python3.11/__pycache__/*.opt-*.pyc
HOOK
chmod +x "$WORK/customize.sh"
rm -rf "$OUT/rootfs"
# --variant=essential: Essential:yes packages only (no apt); python3 brings libpython3.11
mmdebstrap --quiet --variant=essential --include=python3,python3-venv,passwd,libstdc++6 \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --customize-hook="mkdir -p \"\$1/tmp/wheels\" \"\$1/tmp/project\"" \
  --customize-hook="copy-in $WORK/wheels/. /tmp/wheels" \
  --customize-hook="copy-in $WORK/project/. /tmp/project" \
  --customize-hook="$WORK/customize.sh \"\$1\"" \
  bookworm "$WORK/rootfs.tar" "$MIRROR"
mkdir -p "$OUT/rootfs"
tar -C "$OUT/rootfs" -xf "$WORK/rootfs.tar"
chmod 1777 "$OUT/rootfs/tmp"
fi

# --- 3. the OCI image ----------------------------------------------------------------------
log "OCI image $IMAGE (buildah, storage $CONTAINERS_STORAGE_CONF)"
ctr=$(buildah from scratch)
buildah add --quiet "$ctr" "$WORK/rootfs.tar" / >/dev/null
# the same configuration as deploy/Dockerfile's final stage
buildah config \
  --label org.opencontainers.image.title=session-core \
  --label "org.opencontainers.image.description=Session Core services (admission, storage, dispatcher, receipts)" \
  --label org.opencontainers.image.version="$VERSION" \
  --label org.opencontainers.image.source=deploy/image/build.sh \
  --env PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 --env TMPDIR=/tmp \
  --env SESSION_CORE_HTTP_PORT=8080 --env SESSION_CORE_HEALTH_PORT=8081 \
  --user 10001:10001 --workingdir /tmp --port 8080 --port 8081 \
  --entrypoint '["session-core"]' --cmd admission "$ctr"
buildah commit --quiet --rm "$ctr" "$IMAGE" >/dev/null
rm -f "$OUT"/session-core-*.oci.tar
buildah push --quiet "$IMAGE" "oci-archive:$OUT/session-core-$VERSION.oci.tar:$IMAGE"
digest=$(buildah inspect --format '{{.FromImageDigest}}' "$IMAGE" 2>/dev/null || true)
rootfs_mb=$(du -sm "$OUT/rootfs" | cut -f1)
archive_mb=$(du -m "$OUT/session-core-$VERSION.oci.tar" | cut -f1)
{
  echo "image:        $IMAGE"
  echo "digest:       ${digest:-?}"
  echo "rootfs:       ${rootfs_mb} MB unpacked ($OUT/rootfs)"
  echo "oci archive:  ${archive_mb} MB ($OUT/session-core-$VERSION.oci.tar)"
  echo "build time:   ${SECONDS} s"
} | tee "$OUT/build.txt"
cat <<EOF

To push it to your registry and install the chart with it:
  skopeo copy oci-archive:$OUT/session-core-$VERSION.oci.tar docker://REGISTRY/session-core:$VERSION
  # or: buildah push $IMAGE docker://REGISTRY/session-core:$VERSION
  helm install session-core deploy/helm/session-core --set image.repository=REGISTRY/session-core
EOF
