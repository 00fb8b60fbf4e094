#!/usr/bin/env bash
# Builds Traefik, the local node's ingress controller, from the Go module proxy:
#   hack/tools/traefik/build.sh OUT_BINARY
# Traefik's own module does not build as `go install pkg@version` (its go.mod
# has replace directives), and four things in it are not served by the proxy
# this machine reaches, so the build takes the module's source, changes those
# four, and builds it as the main module. The changes, and why each is safe for
# a local ingress controller (docs/development.md, "The ingress controller"):
#   1. The basic-auth middleware's upstream replacement (containous/go-http-auth)
#      is refused: abbot/go-http-auth v0.4.0 is used instead, its basic-auth
#      secret check refuses every password, and digest auth's "stale" answer is
#      a plain challenge. The local cluster configures neither middleware.
#   2. lego's DNS-01 providers pull SDKs the proxy refuses (oci, akamai,
#      huaweicloud, sacloud, ucloud, yandex): the ACME DNS challenge reports
#      that it is not built in. Nothing here can reach an ACME server anyway.
#   3. The `dynamic/ext` extension module is left out of the module zip: an
#      empty one stands in (upstream's adds no fields to open-source builds).
#   4. go.mod loses the refused requirements (`go mod tidy -e`).
set -euo pipefail

TRAEFIK_VERSION=v3.7.13
out=${1:?usage: build.sh OUT_BINARY}
work=$(mktemp -d "${TMPDIR:-/tmp}/traefik-build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
dir=$(cd "$work" && go mod download -json "github.com/traefik/traefik/v3@${TRAEFIK_VERSION}" |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"

python3 - <<'PY'
import pathlib, re

def edit(path, old, new):
    p = pathlib.Path(path)
    text = p.read_text()
    if old not in text:
        raise SystemExit(f"traefik build: {path} no longer contains {old!r}; the patch needs a look")
    p.write_text(text.replace(old, new, 1))

edit("pkg/provider/acme/provider.go", '\t"github.com/go-acme/lego/v5/providers/dns"\n', "")
edit("pkg/provider/acme/provider.go",
     "provider, err = dns.NewDNSChallengeProviderByName(p.DNSChallenge.Provider)",
     'err = fmt.Errorf("DNS challenge provider %q: not built into this binary", p.DNSChallenge.Provider)')
edit("pkg/middlewares/auth/basic_auth.go", "checkSecret:       goauth.CheckSecret,",
     "checkSecret:       func(string, string) bool { return false },")
edit("pkg/middlewares/auth/digest_auth.go", "d.auth.RequireAuthStale(rw, req)", "d.auth.RequireAuth(rw, req)")

mod = pathlib.Path("go.mod")
text = mod.read_text()
text, n = re.subn(r"\tgithub.com/abbot/go-http-auth => \S+ \S+\n", "", text)
if n != 1:
    raise SystemExit("traefik build: the go-http-auth replace directive moved; the patch needs a look")
text = text.replace("github.com/abbot/go-http-auth v0.0.0-00010101000000-000000000000",
                    "github.com/abbot/go-http-auth v0.4.0")
mod.write_text(text)

ext = pathlib.Path("pkg/config/dynamic/ext")
ext.mkdir(parents=True, exist_ok=True)
(ext / "go.mod").write_text("module github.com/traefik/traefik/dynamic/ext\n\ngo 1.24\n")
(ext / "ext.go").write_text("// Package ext is empty in this build.\npackage ext\n\n"
                            "// HTTP adds nothing.\ntype HTTP struct{}\n\n// Router adds nothing.\ntype Router struct{}\n")
PY

# -e: the refused modules are only reachable through tests of dependencies.
go mod tidy -e >/dev/null 2>&1 || true
go build -trimpath -ldflags "-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=${TRAEFIK_VERSION#v}" \
	-o "$out" ./cmd/traefik
