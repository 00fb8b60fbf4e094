# git-clone: populate /projects from a git repository (init container).
# Every input arrives through the environment; no value is ever templated into
# this text, and every expansion below is quoted.
#   TINYCODE_GIT_REPO             repository URL (required)
#   TINYCODE_GIT_BRANCH           branch or tag to check out ("" = remote default)
#   TINYCODE_GIT_DEPTH            clone depth (positive integer, default 1)
#   TINYCODE_GIT_PULL_ON_RESTART  "true" = fast-forward an existing checkout
#   TINYCODE_GIT_CLONE_TIMEOUT    seconds allowed for the clone or pull (default 300)
# Optional credentials, from the Secret mounted read-only at
# /etc/tinycode/git-credentials:
#   username + password  HTTPS, through a credential helper that reads the files
#   ssh-privatekey       SSH, through GIT_SSH_COMMAND (known_hosts used when present)
set -eu

dest=/projects
creds=/etc/tinycode/git-credentials
repo=${TINYCODE_GIT_REPO:-}
branch=${TINYCODE_GIT_BRANCH:-}
depth=${TINYCODE_GIT_DEPTH:-1}
pull=${TINYCODE_GIT_PULL_ON_RESTART:-false}
limit=${TINYCODE_GIT_CLONE_TIMEOUT:-300}

log() { printf 'git-clone: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ -z "$repo" ]; then die "TINYCODE_GIT_REPO is empty"; fi
case $depth in
  '' | *[!0-9]* | 0) die "TINYCODE_GIT_DEPTH must be a positive integer" ;;
esac
case $limit in
  '' | *[!0-9]* | 0) limit=300 ;;
esac
if ! command -v git >/dev/null 2>&1; then die "the image has no git client"; fi
if [ ! -d "$dest" ]; then die "$dest is not mounted"; fi
if [ ! -w "$dest" ]; then die "$dest is not writable by uid $(id -u)"; fi

# Private scratch space: HOME for git, copies of the SSH key and known_hosts.
work=$(mktemp -d /tmp/git-clone.XXXXXX)
staging=
cleanup() {
  rm -rf "$work"
  if [ -n "$staging" ]; then rm -rf "$staging"; fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

export HOME="$work/home"
mkdir -p "$HOME"
export GIT_TERMINAL_PROMPT=0

# Configuration for every git command below, in the environment scope: it is
# honoured for safe.directory (the volume root may belong to another uid) and is
# never written into the repository.
export GIT_CONFIG_COUNT=1
export GIT_CONFIG_KEY_0=safe.directory
export GIT_CONFIG_VALUE_0="$dest"

for key in username password ssh-privatekey known_hosts; do
  if [ -e "$creds/$key" ] && [ ! -r "$creds/$key" ]; then
    die "credentials file $key is not readable by uid $(id -u) (the pod needs an fsGroup for mode 0400 Secret files)"
  fi
done

if [ -r "$creds/username" ] && [ -r "$creds/password" ]; then
  log "using HTTPS credentials (username/password) from the credentials Secret"
  export GIT_CONFIG_COUNT=3
  # An empty helper first resets any helper configured elsewhere.
  export GIT_CONFIG_KEY_1=credential.helper
  export GIT_CONFIG_VALUE_1=
  export GIT_CONFIG_KEY_2=credential.helper
  # Single quotes on purpose: git runs the helper in its own shell, which expands it.
  # shellcheck disable=SC2016
  export GIT_CONFIG_VALUE_2='!f() { test "$1" = get || return 0; printf "username=%s\n" "$(cat /etc/tinycode/git-credentials/username)"; printf "password=%s\n" "$(cat /etc/tinycode/git-credentials/password)"; }; f'
elif [ -r "$creds/ssh-privatekey" ]; then
  log "using the SSH private key from the credentials Secret"
  if ! command -v ssh >/dev/null 2>&1; then die "the image has no ssh client"; fi
  (
    umask 077
    cp "$creds/ssh-privatekey" "$work/id_key"
    # OpenSSH rejects a key without a final newline (common in Secrets).
    if [ "$(tail -c 1 "$work/id_key" | wc -l)" -eq 0 ]; then printf '\n' >>"$work/id_key"; fi
    if [ -r "$creds/known_hosts" ]; then
      cp "$creds/known_hosts" "$work/known_hosts"
    else
      : >"$work/known_hosts"
    fi
  )
  chmod 600 "$work/id_key" "$work/known_hosts"
  if [ -s "$work/known_hosts" ]; then
    hostkeys=yes
  else
    log "warning: no known_hosts in the credentials Secret; trusting the server's host key on first use"
    hostkeys=accept-new
  fi
  # $work comes from mktemp (no quotes or spaces), so this command line is fixed.
  export GIT_SSH_COMMAND="ssh -i '$work/id_key' -o IdentitiesOnly=yes -o BatchMode=yes -o UserKnownHostsFile='$work/known_hosts' -o StrictHostKeyChecking=$hostkeys"
elif [ -n "$(ls -A "$creds" 2>/dev/null)" ]; then
  log "warning: the credentials Secret holds neither username+password nor ssh-privatekey; continuing without credentials"
fi

run_git() {
  if command -v timeout >/dev/null 2>&1; then
    timeout "$limit" git "$@"
  else
    git "$@"
  fi
}

# An existing checkout: keep it, fast-forward it when asked.
if [ -e "$dest/.git" ]; then
  if [ "$pull" != true ]; then
    log "$dest already holds a repository; leaving it unchanged (pullOnRestart is off)"
    exit 0
  fi
  origin=$(git -C "$dest" remote get-url origin 2>/dev/null || true)
  if [ "$origin" != "$repo" ]; then
    log "warning: the checkout's origin differs from git.url; pulling from its origin anyway"
  fi
  log "pulling (fast-forward only) into $dest"
  status=0
  run_git -C "$dest" pull --ff-only || status=$?
  if [ "$status" -ne 0 ]; then
    if [ "$status" -eq 124 ]; then log "pull timed out after ${limit}s"; fi
    log "warning: pull failed (status $status); starting with the existing checkout"
  fi
  exit 0
fi

# Staging directories left by an interrupted earlier attempt.
for old in "$dest"/.tinycode-git-clone.*; do
  if [ -e "$old" ]; then rm -rf "$old"; fi
done

# Clone next to the target (same filesystem, so the final moves are renames),
# then move the contents in. This works when the volume is not empty (for
# example lost+found on a fresh filesystem) and never overwrites anything.
staging=$(mktemp -d "$dest/.tinycode-git-clone.XXXXXX")
set -- clone "--depth=$depth"
if [ -n "$branch" ]; then set -- "$@" "--branch=$branch"; fi
set -- "$@" -- "$repo" "$staging/src"
if [ -n "$branch" ]; then
  log "cloning branch $branch (depth $depth)"
else
  log "cloning the default branch (depth $depth)"
fi
status=0
run_git "$@" || status=$?
if [ "$status" -eq 124 ]; then die "clone timed out after ${limit}s"; fi
if [ "$status" -ne 0 ]; then die "clone failed (status $status, see the messages above)"; fi

conflicts=
for entry in "$staging/src"/* "$staging/src"/.[!.]* "$staging/src"/..?*; do
  if [ ! -e "$entry" ] && [ ! -L "$entry" ]; then continue; fi
  name=${entry##*/}
  if [ -e "$dest/$name" ] || [ -L "$dest/$name" ]; then conflicts="$conflicts $name"; fi
done
if [ -n "$conflicts" ]; then
  die "$dest is not empty and has no .git; these entries would be overwritten:$conflicts (empty the volume or remove them)"
fi

# .git goes last: its presence marks a complete checkout.
for entry in "$staging/src"/* "$staging/src"/.[!.]* "$staging/src"/..?*; do
  if [ ! -e "$entry" ] && [ ! -L "$entry" ]; then continue; fi
  name=${entry##*/}
  if [ "$name" = .git ]; then continue; fi
  mv -- "$entry" "$dest/$name"
done
mv -- "$staging/src/.git" "$dest/.git"
rm -rf "$staging"
staging=
log "clone complete"
