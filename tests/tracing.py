"""Child processes traced with strace: every connect/sendto/sendmsg they make, and the ones that leave loopback.

The in-process guard (`tests/conftest.py`) sees the pytest process only; Ray's daemons, Chromium, the benchmark
scripts and the command line run as children are traced instead: `traced` puts ``strace -f`` (with a seccomp
filter, so only the network calls stop the process) in front of a command, and `non_loopback_targets` reads the
trace. Used by `tests/test_network_guard.py` and `tests/test_benchmarks_smoke.py`.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
from pathlib import Path

import pytest

NETWORK_CALLS = "connect,sendto,sendmsg,sendmmsg"
# One traced call: `1234 connect(6, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("8.8.8.8")}, 16) = 0`
_CALL = re.compile(r"^(?:\[pid\s+)?(?P<pid>\d+)\]?\s+(?P<call>connect|sendto|sendmsg|sendmmsg)\((?P<args>.*)$")
_INET = re.compile(r'inet_addr\("(?P<v4>[^"]+)"\)|inet_pton\(AF_INET6?,\s*"(?P<v6>[^"]+)"')


def strace() -> str:
    """strace's path; a missing strace fails the test (nothing would check the children otherwise)."""
    found = shutil.which("strace")
    if found is None:
        pytest.fail(
            "strace is not installed, so nothing checks that child processes stay on loopback: "
            "install it (apt-get install strace; .ci/run does)",
            pytrace=False,
        )
    return found


def traced(command: list[str], trace: Path, calls: str = NETWORK_CALLS) -> list[str]:
    """`command` under ``strace -f``, its `calls` (and every child's) written to `trace`."""
    return [strace(), "-f", "-qq", "--seccomp-bpf", "-s", "120", "-e", f"trace={calls}", "-o", str(trace), *command]


def non_loopback_targets(trace: str, unreachable_ok: bool = False) -> list[str]:
    """Each traced connect/sendto/sendmsg whose address is outside loopback, as ``pid call address``.

    AF_UNIX, AF_NETLINK and sends on a connected socket (no address: its connect was traced) pass; an
    AF_INET/AF_INET6 address this parser cannot read counts as outside, so a new strace format fails loudly.
    With `unreachable_ok`, a call the kernel refused for want of a route or an address (``ENETUNREACH``,
    ``EADDRNOTAVAIL``: in a namespace holding only loopback) passes: it sent nothing.
    """
    outside = []
    for line, result in _calls(trace):
        call = _CALL.match(line.strip())
        if not call or "sa_family=AF_INET" not in call["args"]:
            continue
        if unreachable_ok and re.search(r"= -1 (ENETUNREACH|EADDRNOTAVAIL)\b", result):
            continue
        addresses = [m["v4"] or m["v6"] for m in _INET.finditer(call["args"])]
        for address in addresses or ["<unparsed: " + call["args"][:120] + ">"]:
            try:
                parsed = ipaddress.ip_address(address)
                parsed = getattr(parsed, "ipv4_mapped", None) or parsed
                if parsed.is_loopback or parsed.is_unspecified:
                    continue
            except ValueError:
                pass
            outside.append(f"{call['pid']} {call['call']} {address}")
    return outside


def _calls(trace: str) -> list[tuple[str, str]]:
    """(the call's line, the line that holds its result): strace -f splits a call another process interrupts
    into ``... <unfinished ...>`` and, later, ``<... connect resumed>) = -1 ...`` on the same pid."""
    pending: dict[str, int] = {}
    calls: list[list[str]] = []
    for line in trace.splitlines():
        pid = line.strip().lstrip("[pid").split(maxsplit=1)[0].rstrip("]") if line.strip() else ""
        if "resumed>" in line and pid in pending:
            calls[pending.pop(pid)][1] = line
            continue
        calls.append([line, line])
        if line.rstrip().endswith("<unfinished ...>"):
            pending[pid] = len(calls) - 1
    return [(line, result) for line, result in calls]


def check_stayed_home(trace_text: str, what: str, unreachable_ok: bool = False) -> None:
    """Fail naming every call of `what`'s processes that left loopback."""
    outside = non_loopback_targets(trace_text, unreachable_ok)
    assert not outside, f"{what}: {len(outside)} connect/send calls left loopback, e.g.:\n" + "\n".join(outside[:10])
