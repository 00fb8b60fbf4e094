"""A person's path through an instance's URL, in a real browser: headless
Chromium (Debian's package) driven by Playwright for Python. The node tests
(tools/tests/node.rs) run it and assert on what it reports: for each step the
HTTP status, the page's title, the text of the elements the step reads, and a
screenshot under --screenshots (kept as files, never compared).

    python browser.py password --url URL --password-file FILE --cert PEM \
        --screenshots DIR --name NAME

Prints one JSON object: {"steps": [{"step", "status", "title", "text",
"authenticate", "elements": {...}}, ...]}.

The browser resolves only the names it is sent to (*.apps.localhost and
localhost, which are loopback); every other name fails to resolve, so its
background services cannot reach anywhere. It trusts exactly one certificate
key, the ingress controller's (--cert), and no other.
"""
import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys

from playwright.sync_api import sync_playwright


def spki_sha256(cert_path):
    """The base64 SHA-256 of the certificate's public key, as Chromium's
    --ignore-certificate-errors-spki-list takes it."""
    pub = subprocess.run(["openssl", "x509", "-in", cert_path, "-pubkey", "-noout"],
                         check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub,
                         check=True, capture_output=True).stdout
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def launch(p, args):
    return p.chromium.launch(
        executable_path=args.chromium,
        args=[
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE *.apps.localhost, EXCLUDE localhost",
            "--ignore-certificate-errors-spki-list=" + spki_sha256(args.cert),
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-pings",
        ],
    )


def visit(browser, args, step, credentials, read):
    """Opens the URL in a fresh context (no cookies, no cached credentials)."""
    context = browser.new_context(http_credentials=credentials) if credentials else browser.new_context()
    page = context.new_page()
    # The answers to the document request, as the browser received them: a
    # password prompt is a 401 the browser does not render (with no password,
    # or a wrong one, Playwright cancels the prompt and navigation fails).
    answers = []
    page.on("response", lambda r: answers.append(r) if r.request.is_navigation_request() else None)
    error = None
    try:
        page.goto(args.url, wait_until="load")
    except Exception as e:  # noqa: BLE001 -- the error is what the step reports
        error = str(e).splitlines()[0]
    last = answers[-1] if answers else None
    result = {
        "step": step,
        "status": last.status if last else None,
        "authenticate": last.headers.get("www-authenticate") if last else None,
        "error": error,
        "title": page.title(),
        "text": page.locator("body").inner_text(),
        "elements": {sel: page.locator(sel).inner_text() for sel in read if page.locator(sel).count() == 1},
    }
    os.makedirs(args.screenshots, exist_ok=True)
    page.screenshot(path=os.path.join(args.screenshots, f"{args.name}-{step}.png"), full_page=True)
    context.close()
    return result


def password(args):
    with open(args.password_file) as f:
        secret = f.read().strip()
    steps = []
    with sync_playwright() as p:
        browser = launch(p, args)
        steps.append(visit(browser, args, "prompt", None, []))
        steps.append(visit(browser, args, "wrong-password",
                           {"username": "tinycode", "password": secret + "-wrong"}, []))
        steps.append(visit(browser, args, "signed-in",
                           {"username": "tinycode", "password": secret}, ["#pod", "#secret", "h1"]))
        browser.close()
    return {"steps": steps}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["password"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--password-file", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--screenshots", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--chromium", default=os.environ.get("TINYCODE_CHROMIUM", "chromium"))
    args = parser.parse_args()
    json.dump(password(args), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
