#!/usr/bin/env bash
# Smoke test of the built image (CI runs it after `make image`): every service's command starts
# from the image against a real Kafka + MongoDB-wire store and its /readyz answers 200.
#
#   1. `session-core topics` (the chart's Job) from the image creates this run's topics;
#   2. admission, storage, dispatcher and receipts start from the image, each with its own
#      metrics/health port (SESSION_CORE_HEALTH_PORT), admission also on its HTTP port;
#   3. each /readyz must answer 200 within 90 s, and admission's /metrics must show the HTTP
#      histogram; then SIGTERM, and each must exit.
#
# How the image runs: `podman run` (network host, read-only root, tmpfs /tmp, user 10001) when
# podman can start a container here; otherwise — SMOKE_RUNNER=chroot, or podman failing — the
# image's root file system (deploy/image/build.sh leaves it in ~/.cache/session-core/image/rootfs)
# under `chroot --userspec=10001:10001` with the image's environment. The runner used is printed.
#
# The stack: KAFKA_BOOTSTRAP_SERVERS and MONGODB_URI when set; otherwise a private one is started
# with deploy/local/stack (Kafka + FerretDB on free ports) and stopped at the end.
set -euo pipefail

STEP=smoke
# shellcheck source=deploy/image/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROOTFS="$OUT/rootfs"
SERVICES=(admission storage dispatcher receipts)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/session-core-smoke.XXXXXX")
PIDS=()
STACK_DIR=""
PROC_MOUNTED=""
SHM_MOUNTED=""
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ -n $PROC_MOUNTED ]]; then umount "$ROOTFS/proc" 2>/dev/null || true; fi
  if [[ -n $SHM_MOUNTED ]]; then umount "$ROOTFS/dev/shm" 2>/dev/null || true; fi
  if [[ -n $STACK_DIR ]]; then PYTHONPATH="$REPO" python3 -m deploy.local.stack down --state-dir "$STACK_DIR" >/dev/null 2>&1 || true; fi
  if ((rc != 0)); then
    for f in "$WORK"/*.log; do [[ -f $f ]] && { echo "--- $f"; tail -n 30 "$f"; }; done
    echo "smoke: FAIL: ${FAIL_REASON:-exit $rc} (the services' logs are above)" >&2
  fi
  rm -rf "$WORK"
  [[ -n $STACK_DIR ]] && rm -rf "$STACK_DIR"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # so that cleanup also runs when the smoke test is stopped

# --- the stack ----------------------------------------------------------------------------
if [[ -z ${KAFKA_BOOTSTRAP_SERVERS:-} || -z ${MONGODB_URI:-} ]]; then
  STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/session-core-smoke-stack.XXXXXX")
  kport=$(free_port) mport=$(free_port)
  log "starting a private Kafka + FerretDB (deploy.local.stack up, ports $kport / $mport)"
  PYTHONPATH="$REPO" python3 -m deploy.local.stack up --state-dir "$STACK_DIR" --kafka-port "$kport" \
    --mongo-port "$mport" >"$WORK/stack.log" 2>&1 || { cat "$WORK/stack.log" >&2; die "stack up"; }
  KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:$kport"
  MONGODB_URI="mongodb://127.0.0.1:$mport/"
fi
TAG="smoke$(date +%s)$RANDOM"
ENV=(
  "KAFKA_BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS" "MONGODB_URI=$MONGODB_URI"
  "SESSION_CORE_TOPIC_PREFIX=$TAG." "SESSION_CORE_MONGODB_DATABASE=$TAG"
  "SESSION_CORE_TOPIC_PARTITIONS=2" "SESSION_CORE_LOG_FORMAT=json"
  "SESSION_CORE_HTTP_HOST=127.0.0.1" "SESSION_CORE_AUTH_DISABLED=true"
)

# --- the runner ---------------------------------------------------------------------------
RUNNER="${SMOKE_RUNNER:-}"
if [[ -z $RUNNER ]]; then
  if command -v podman >/dev/null && podman image exists "$IMAGE" 2>/dev/null &&
     timeout 120 podman run --rm --network host "$IMAGE" --help >"$WORK/podman-probe.log" 2>&1; then
    RUNNER=podman
  else
    log "podman cannot run $IMAGE here: $(tail -n 3 "$WORK/podman-probe.log" 2>/dev/null | tr '\n' ' ')"
    RUNNER=chroot
  fi
fi
if [[ $RUNNER == chroot ]]; then
  [[ -x $ROOTFS/opt/venv/bin/session-core ]] || die "no root file system at $ROOTFS (run make image)"
  if ! mountpoint -q "$ROOTFS/proc" && mount -t proc proc "$ROOTFS/proc" 2>/dev/null; then
    PROC_MOUNTED=1
  fi
  # POSIX semaphores (admission's body-parser process pool, services/admission/parsing.py) live
  # in /dev/shm, which every container runtime mounts as a world-writable tmpfs; the bare root
  # file system has only a root-owned directory there
  if ! mountpoint -q "$ROOTFS/dev/shm"; then
    if mount -t tmpfs -o mode=1777,size=64m shm "$ROOTFS/dev/shm" 2>/dev/null; then
      SHM_MOUNTED=1
    else
      chmod 1777 "$ROOTFS/dev/shm"
    fi
  fi
fi
log "runner: $RUNNER (image $IMAGE)"

# run NAME ENV... -- ARGS...: the image's command in the background, output in $WORK/NAME.log
run() {
  local name=$1 && shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1") && shift; done
  shift
  if [[ $RUNNER == podman ]]; then
    local eargs=()
    for e in "${ENV[@]}" "${envs[@]}"; do eargs+=(--env "$e"); done
    podman run --rm --name "$TAG-$name" --network host --read-only --tmpfs /tmp:size=64m \
      --cap-drop ALL --security-opt no-new-privileges "${eargs[@]}" "$IMAGE" "$@" \
      >"$WORK/$name.log" 2>&1 &
  else
    # the image's config (build.sh's buildah config): PATH, PYTHON*, TMPDIR, user, workdir
    chroot --userspec=10001:10001 "$ROOTFS" /usr/bin/env -i \
      PATH=/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1 \
      PYTHONUNBUFFERED=1 TMPDIR=/tmp HOME=/nonexistent "${ENV[@]}" "${envs[@]}" \
      sh -c 'cd /tmp && exec session-core "$@"' session-core "$@" >"$WORK/$name.log" 2>&1 &
  fi
  PIDS+=($!)
}

READY_S="${SMOKE_READY_TIMEOUT:-240}"  # a loaded CI machine imports slowly
wait_ready() { # NAME URL PID
  local deadline=$((SECONDS + READY_S)) code
  while ((SECONDS < deadline)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$2" || true)
    if [[ $code == 200 ]]; then echo "  $1: GET $2 -> 200"; return 0; fi
    kill -0 "$3" 2>/dev/null || die "$1 exited before it was ready"
    sleep 1
  done
  die "$1: $2 did not answer 200 within $READY_S s (last: $code)"
}

# --- 1. topics ----------------------------------------------------------------------------
log "session-core topics (as the chart's Job runs it)"
run topics -- topics
wait "${PIDS[-1]}" || die "session-core topics failed"
unset 'PIDS[-1]'
grep -q '"topics.created"' "$WORK/topics.log" || die "topics created nothing"
echo "  topics: exit 0 ($(grep -o '"topics": *\[[^]]*\]' "$WORK/topics.log" | tr ',' '\n' | wc -l) topics created)"

# --- 2. the four services -----------------------------------------------------------------
declare -A HEALTH
HTTP_PORT=$(free_port)
for svc in "${SERVICES[@]}"; do
  HEALTH[$svc]=$(free_port)
  run "$svc" "SESSION_CORE_HEALTH_PORT=${HEALTH[$svc]}" "SESSION_CORE_HTTP_PORT=$HTTP_PORT" -- "$svc"
  eval "PID_$svc=${PIDS[-1]}"
done
for svc in "${SERVICES[@]}"; do
  pid_var="PID_$svc"
  wait_ready "$svc" "http://127.0.0.1:${HEALTH[$svc]}/readyz" "${!pid_var}"
done
wait_ready "admission (HTTP API)" "http://127.0.0.1:$HTTP_PORT/readyz" "$PID_admission"
# to a file first: `curl | grep -q` fails under pipefail when grep exits before curl has written
# everything (curl: exit 23 on the closed pipe), a flaky "no histogram"
curl -s --max-time 10 -o "$WORK/metrics.txt" "http://127.0.0.1:${HEALTH[admission]}/metrics" ||
  die "admission's /metrics did not answer"
grep -q '^session_core_http_request_duration_seconds_bucket' "$WORK/metrics.txt" ||
  die "admission's /metrics lacks the HTTP histogram"
echo "  admission: /metrics on its metrics port serves session_core_http_request_duration_seconds"

# --- 3. stop ------------------------------------------------------------------------------
log "SIGTERM to every service"
for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for svc in "${SERVICES[@]}"; do
  pid_var="PID_$svc"
  rc=0 && wait "${!pid_var}" || rc=$?
  echo "  $svc: exited with $rc"
done
PIDS=()
echo "image smoke: OK ($RUNNER; topics + ${SERVICES[*]} ready on the real stack)"
