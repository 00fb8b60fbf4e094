#!/usr/bin/env bash
# The browser the tests drive: Debian's `chromium` package and Playwright for
# Python (PyPI) in a virtualenv cached outside the repository, keyed by its
# version. Installs what is missing, then prints
#   TINYCODE_BROWSER_PYTHON=<the virtualenv's python, with playwright>
#   TINYCODE_CHROMIUM=<chromium's executable>
# Playwright's own browser downloads are never used (nothing outside the
# registries is reachable): it drives the system Chromium.
set -euo pipefail

PLAYWRIGHT_VERSION=1.65.2
CACHE_DIR=${TINYCODE_CACHE_DIR:-${HOME}/.cache/tinycode-operator}
VENV="${CACHE_DIR}/playwright-${PLAYWRIGHT_VERSION}"

log() { printf 'browser: %s\n' "$*" >&2; }

if ! command -v chromium >/dev/null 2>&1; then
	command -v apt-get >/dev/null 2>&1 || { log "chromium is missing and there is no apt-get"; exit 1; }
	log "installing Debian's chromium"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2 ||
		{ apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2; }
fi

if ! "${VENV}/bin/python" -c 'import playwright.sync_api' >/dev/null 2>&1; then
	log "installing Playwright ${PLAYWRIGHT_VERSION} into ${VENV}"
	# Built in place (its scripts name their own path); a half-built one fails
	# the import check above and is built again.
	rm -rf "$VENV"
	python3 -m venv "$VENV"
	"${VENV}/bin/pip" install --quiet --disable-pip-version-check "playwright==${PLAYWRIGHT_VERSION}" >&2
fi

printf 'TINYCODE_BROWSER_PYTHON=%s\n' "${VENV}/bin/python"
printf 'TINYCODE_CHROMIUM=%s\n' "$(command -v chromium)"
