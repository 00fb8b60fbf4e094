# ollama-entrypoint: start "ollama serve", wait until it answers, pull every
# model named as a positional argument, then keep serving. Model names arrive
# only as arguments ("$@"); no value is ever templated into this text.
set -u

log() { printf 'ollama-entrypoint: %s\n' "$*" >&2; }

ollama serve &
server=$!

# shellcheck disable=SC2329 # called by the trap below
stop() {
  kill -TERM "$server" 2>/dev/null
  wait "$server"
  exit $?
}
trap stop TERM INT

tries=0
until ollama list >/dev/null 2>&1; do
  if ! kill -0 "$server" 2>/dev/null; then
    wait "$server"
    status=$?
    log "ollama serve exited (status $status) before answering"
    if [ "$status" -eq 0 ]; then status=1; fi
    exit "$status"
  fi
  tries=$((tries + 1))
  if [ "$tries" -ge 180 ]; then
    log "ollama serve did not answer within 180s"
    kill -TERM "$server" 2>/dev/null
    exit 1
  fi
  sleep 1
done

for model in "$@"; do
  log "pulling model $model"
  # In the background, so a TERM during a long download is handled at once.
  ollama pull -- "$model" &
  if ! wait "$!"; then
    log "warning: could not pull model $model; continuing without it"
  fi
done
log "ready"

wait "$server"
status=$?
log "ollama serve exited (status $status)"
exit "$status"
