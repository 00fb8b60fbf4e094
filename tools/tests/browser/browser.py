"""A person's path through an instance's URL, in a real browser: headless
Chromium (Debian's package) driven by Playwright for Python. The node tests
(tools/tests/node.rs) run it and assert on what it reports: for each step the
HTTP status, the page's title, the text of the elements the step reads, and a
screenshot under --screenshots (kept as files, never compared).

    python browser.py password --url URL --password-file FILE --cert PEM \
        --screenshots DIR --name NAME
    python browser.py oidc --url URL --other-url URL --queue URL --allowed EMAIL \
        --refused EMAIL --issuer URL --map IP --cert PEM --screenshots DIR --name NAME
    python browser.py page --step STEP --url URL --queue URL --allowed EMAIL \
        --issuer URL --map IP --cert PEM --screenshots DIR --name NAME
    python browser.py starting --url URL --queue URL --allowed EMAIL --issuer URL \
        --map IP --mark FILE --until SELECTOR --cert PEM --screenshots DIR --name NAME
    python browser.py page|starting --password-file FILE --url URL ... (password mode)

`page` signs in (or, with --password-file, gives the password) and reports
the page it lands on as step STEP (a stopped instance's, a failed sign-in's).
`starting` does the same, reports the first page (a starting instance's), writes --mark (so
the test can let the instance start), then waits on the same page, which
reloads itself, until --until is on it, and reports that page too.

`oidc` runs inside the node's network namespace (the tests start it with
nsenter), where the OpenID Connect provider lives: the instances' names are
mapped to the ingress controller's Service address (--map), so the URLs are
the instances' own (status.url, port 443).

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
import urllib.parse
import urllib.request

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
    if args.map:
        # The provider is named by its address in the node's network, which
        # the rules leave alone (a rule matches addresses too).
        provider = urllib.parse.urlparse(args.issuer).hostname
        rules = f"MAP *.apps.localhost {args.map}, MAP * ~NOTFOUND, EXCLUDE {provider}"
    else:
        rules = "MAP * ~NOTFOUND, EXCLUDE *.apps.localhost, EXCLUDE localhost"
    return p.chromium.launch(
        executable_path=args.chromium,
        args=[
            "--host-resolver-rules=" + rules,
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
    result = open_in(context, args, step, args.url, read)
    context.close()
    return result


def open_in(context, args, step, url, read, block=None):
    """Opens `url` in a new page of `context` (its cookies kept); requests to
    URLs starting with `block` are not sent. Reports every answer to the
    document request (redirects included) as `hops`."""
    page = context.new_page()
    if block:
        page.route(block + "**", lambda route: route.abort())
    # The answers to the document request, as the browser received them: a
    # password prompt is a 401 the browser does not render (with no password,
    # or a wrong one, Playwright cancels the prompt and navigation fails).
    answers = []
    page.on("response", lambda r: answers.append(r) if r.request.is_navigation_request() else None)
    error = None
    try:
        page.goto(url, wait_until="load")
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
        "hops": [{"url": a.url, "status": a.status, "location": a.headers.get("location")} for a in answers],
        "final_url": page.url,
    }
    os.makedirs(args.screenshots, exist_ok=True)
    page.screenshot(path=os.path.join(args.screenshots, f"{args.name}-{step}.png"), full_page=True)
    page.close()
    return result


def queue(args, email):
    """Tells the OpenID Connect stand-in who signs in next (it has no login
    form: the next authorization is that user's)."""
    body = json.dumps({"subject": "sub-" + email, "email": email, "preferred_username": email,
                       "groups": ["node-devs"]}).encode()
    # ?only=true: the queue holds this user alone, whatever an earlier,
    # unfinished sign-in left in it.
    request = urllib.request.Request(args.queue + "?only=true", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        if answer.status // 100 != 2:
            raise SystemExit(f"queueing {email}: status {answer.status}")


def oidc(args):
    steps = []
    with sync_playwright() as p:
        browser = launch(p, args)
        queue(args, args.allowed)
        context = browser.new_context()
        steps.append(open_in(context, args, "allowed", args.url, ["#pod", "#secret", "h1"]))
        # The same browser, signed in at the first instance, opens another:
        # that instance's sign-in starts over (the provider is not asked).
        steps.append(open_in(context, args, "other-instance", args.other_url, [], block=args.issuer))
        context.close()
        queue(args, args.refused)
        context = browser.new_context()
        steps.append(open_in(context, args, "refused", args.url, ["#instance", "#namespace", "#command", "#message"]))
        context.close()
        browser.close()
    return {"steps": steps}


PAGE_ELEMENTS = ["#instance", "#namespace", "#command", "#message", "#retry", "#next"]


def entered(browser, args):
    """A fresh context that gets in: with --password-file, the instance's
    password (the browser answers the prompt); otherwise --allowed is the
    next user the provider signs in."""
    if args.password_file:
        with open(args.password_file) as f:
            secret = f.read().strip()
        return browser.new_context(http_credentials={"username": "tinycode", "password": secret})
    queue(args, args.allowed)
    return browser.new_context()


def signed_in_page(args):
    with sync_playwright() as p:
        browser = launch(p, args)
        context = entered(browser, args)
        step = open_in(context, args, args.step, args.url, PAGE_ELEMENTS)
        context.close()
        browser.close()
    return {"steps": [step]}


def report(args, page, step, answers, read):
    last = answers[-1] if answers else None
    os.makedirs(args.screenshots, exist_ok=True)
    page.screenshot(path=os.path.join(args.screenshots, f"{args.name}-{step}.png"), full_page=True)
    return {
        "step": step,
        "status": last.status if last else None,
        "title": page.title(),
        "text": page.locator("body").inner_text(),
        "elements": {sel: page.locator(sel).inner_text() for sel in read if page.locator(sel).count() == 1},
        "hops": [{"url": a.url, "status": a.status, "location": a.headers.get("location")} for a in answers],
    }


def starting(args):
    with sync_playwright() as p:
        browser = launch(p, args)
        context = entered(browser, args)
        page = context.new_page()
        answers = []
        page.on("response", lambda r: answers.append(r) if r.request.is_navigation_request() else None)
        page.goto(args.url, wait_until="load")
        steps = [report(args, page, "starting", answers, PAGE_ELEMENTS)]
        with open(args.mark, "w") as f:
            f.write("seen\n")
        # Only the page's own reloads from here: nothing is clicked or typed.
        page.wait_for_selector(args.until, timeout=180_000)
        page.wait_for_load_state("load")
        answers = answers[-1:]
        steps.append(report(args, page, "started", answers, [args.until, "#pod", "h1"]))
        context.close()
        browser.close()
    return {"steps": steps}


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
    parser.add_argument("scenario", choices=["password", "oidc", "page", "starting"])
    parser.add_argument("--step")
    parser.add_argument("--url", required=True)
    parser.add_argument("--password-file")
    parser.add_argument("--other-url")
    parser.add_argument("--queue")
    parser.add_argument("--allowed")
    parser.add_argument("--refused")
    parser.add_argument("--issuer")
    parser.add_argument("--map")
    parser.add_argument("--mark")
    parser.add_argument("--until")
    parser.add_argument("--cert", required=True)
    parser.add_argument("--screenshots", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--chromium", default=os.environ.get("TINYCODE_CHROMIUM", "chromium"))
    args = parser.parse_args()
    scenarios = {"password": password, "oidc": oidc, "page": signed_in_page, "starting": starting}
    json.dump(scenarios[args.scenario](args), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
