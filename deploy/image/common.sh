# shellcheck shell=bash
# What build.sh and smoke.sh share (sourced, after `set -euo pipefail`): where the repository
# and the output are, the image's name and version, the containers storage, and log/die with
# the caller's $STEP as prefix.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE="${SESSION_CORE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/session-core}"
OUT="${OUT:-$CACHE/image}"
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml" | head -1)
IMAGE="${IMAGE:-localhost/session-core:$VERSION}"
# containers storage of its own (not the machine's /var/lib/containers), driver vfs: works in
# nested containers where overlay cannot mount.
export CONTAINERS_STORAGE_CONF="${CONTAINERS_STORAGE_CONF:-$CACHE/image-storage.conf}"
if [[ ! -f $CONTAINERS_STORAGE_CONF ]]; then
  mkdir -p "$CACHE/containers"
  printf '[storage]\ndriver = "vfs"\ngraphroot = "%s"\nrunroot = "%s"\n' \
    "$CACHE/containers/storage" "$CACHE/containers/run" >"$CONTAINERS_STORAGE_CONF"
fi

log() { printf '==> [%s %4ds] %s\n' "$STEP" "$SECONDS" "$*" >&2; }
die() { FAIL_REASON="$*"; printf '%s: FAIL: %s\n' "$STEP" "$*" >&2; exit 1; }
