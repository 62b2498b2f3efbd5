"""The one way the suite and the benchmarks start headless Chromium: so that it makes no outside connection.

Chromium, even headless on a ``file:`` page, talks to the world unless told not to: component and safe-browsing
updates, domain reliability reports, and (after the host's network changes) an IPv6 reachability probe that
connects a UDP socket to a public address. Two layers keep it on the machine:

* the flags below turn each of those services off and resolve no host name (`ARGS`);
* where ``unshare --net`` works (root, or unprivileged user namespaces), Chromium runs in a network namespace of
  its own that holds only a loopback interface: nothing outside exists for it to reach, and the host's network
  changes, which start the probe, never reach it. The pages it opens are files, so it needs no network at all.

`tests/test_network_guard.py` traces a browser test with strace and fails on any connect that leaves loopback.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    "--disable-quic",
    "--dns-prefetch-disable",
    "--no-pings",
    "--metrics-recording-only",
    # Every host name resolves to loopback, where nothing serves 80 or 443: a request the flags above miss (the
    # network-time query, the search page's own calls) fails on this machine. (``MAP * ~NOTFOUND`` no longer
    # means "not found": Chromium looks up the name "~notfound", which starts its IPv6 probe and a DNS query.)
    "--host-resolver-rules=MAP * 127.0.0.1",
)


def available() -> bool:
    """Debian's Chromium and Playwright are both here."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return CHROMIUM.exists()


@functools.cache
def executable() -> str:
    """Chromium behind a wrapper that starts it in a network namespace of its own, where one can be made here;
    else Chromium itself (the flags alone then keep it home)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return str(CHROMIUM)
    for command in ([unshare, "--net"], [unshare, "--net", "--map-root-user"]):
        try:
            if subprocess.run([*command, "true"], capture_output=True, timeout=30).returncode == 0:
                break
        except (OSError, subprocess.TimeoutExpired):
            continue
    else:
        return str(CHROMIUM)
    wrapper = Path(tempfile.mkdtemp(prefix="beir-harness-chromium-")) / "chromium"
    wrapper.write_text(f'#!/bin/sh\nexec {" ".join(command)} -- {CHROMIUM} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def launch(playwright: Any, **options: Any) -> Any:
    """A headless Chromium browser from a started Playwright (``sync_playwright().start()`` or its ``with``)."""
    return playwright.chromium.launch(executable_path=executable(), args=list(ARGS), **options)
