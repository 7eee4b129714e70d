#!/usr/bin/env bash
# Resolves pyproject.toml into the project's three locks, with hashes (docs/dependencies.md):
#   OUT/dev.lock     dev/test: everything (the venv of make install / make test), any platform
#   OUT/client.lock  the client distribution: the base dependencies only, any platform
#   OUT/image.lock   the server image: [server] for the image's platform (deploy/image/)
# uv keeps every pin already in OUT that still satisfies pyproject.toml; UPGRADE=1 moves every
# pin to the newest allowed version. Usage: requirements/lock.sh OUT_DIR (make lock, make lock-check)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: requirements/lock.sh OUT_DIR}
uv=${UV:-.venv/bin/uv}
common=(--quiet --refresh --generate-hashes --python-version 3.11 --custom-compile-command "make lock")
[[ -n ${UPGRADE:-} ]] && common+=(--upgrade)
"$uv" pip compile pyproject.toml --extra dev --universal "${common[@]}" -o "$out/dev.lock"
"$uv" pip compile pyproject.toml --universal "${common[@]}" -o "$out/client.lock"
"$uv" pip compile pyproject.toml --extra server --python-platform x86_64-manylinux_2_28 \
  "${common[@]}" -o "$out/image.lock"
