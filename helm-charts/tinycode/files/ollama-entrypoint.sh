# ollama-entrypoint: start "ollama serve", wait until it answers, pull every
# model named as a positional argument, then mark the container ready and keep
# serving. Model names arrive only as arguments ("$@"); no value is ever
# templated into this text.
# The readiness probe looks for $ready: the pod is Ready only once every model
# is pulled, so the instance is Running only with its models in place. A model
# that cannot be pulled after three tries ends the container (its last log line,
# the termination message, names the model), and the kubelet retries later.
set -u

ready=/run/tinycode-ollama/ready
log() { printf 'ollama-entrypoint: %s\n' "$*" >&2; }
rm -f "$ready"

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
    kill -TERM "$server" 2>/dev/null
    wait "$server" 2>/dev/null
    log "ollama serve did not answer within 180s"
    exit 1
  fi
  sleep 1
done

for model in "$@"; do
  attempt=1
  while :; do
    log "pulling model $model (attempt $attempt)"
    # In the background, so a TERM during a long download is handled at once.
    ollama pull -- "$model" &
    if wait "$!"; then break; fi
    if [ "$attempt" -ge 3 ]; then
      # The server first, the message last: the shell may report the killed
      # job ("Terminated"), and the last log line must be ours.
      kill -TERM "$server" 2>/dev/null
      wait "$server" 2>/dev/null
      log "error: could not pull model $model after $attempt attempts (check spec.ollama.models)"
      exit 1
    fi
    sleep $((attempt * 5))
    attempt=$((attempt + 1))
  done
done
: >"$ready"
log "ready"

wait "$server"
status=$?
log "ollama serve exited (status $status)"
exit "$status"
