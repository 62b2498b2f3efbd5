"""The suite stays on the loopback interface, and both guards that say so can fail.

* In the pytest process: `tests/conftest.py` wraps socket connects, UDP sends and resolver lookups;
  leaving loopback raises NetworkGuardError and fails the test, even when the code swallowed the error.
* In child processes (Ray's GCS, raylet, dashboard, agents and workers, which the in-process guard
  cannot see): a `--ray-local` run traced with `strace -f`, every connect/sendto/sendmsg target checked.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
ROOT = TESTS.parent
OUTSIDE = "10.255.255.1"  # a private address nothing here serves: the guard must stop us before the kernel

# One traced call: `1234 connect(6, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("8.8.8.8")}, 16) = 0`
_CALL = re.compile(r"^(?:\[pid\s+)?(?P<pid>\d+)\]?\s+(?P<call>connect|sendto|sendmsg|sendmmsg)\((?P<args>.*)$")
_INET = re.compile(r'inet_addr\("(?P<v4>[^"]+)"\)|inet_pton\(AF_INET6?,\s*"(?P<v6>[^"]+)"')


def non_loopback_targets(trace: str) -> list[str]:
    """Each traced connect/sendto/sendmsg whose address is outside loopback, as ``pid call address``.

    AF_UNIX, AF_NETLINK and sends on a connected socket (no address: its connect was traced) pass; an
    AF_INET/AF_INET6 address this parser cannot read counts as outside, so a new strace format fails loudly.
    """
    outside = []
    for line in trace.splitlines():
        call = _CALL.match(line.strip())
        if not call or "sa_family=AF_INET" not in call["args"]:
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


# --- the in-process guard ------------------------------------------------------------------------


def test_the_guard_refuses_every_way_out_of_loopback(network_guard):
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        attempts = [lambda: tcp.connect((OUTSIDE, 80)), lambda: tcp.connect_ex((OUTSIDE, 80)),
                    lambda: udp.sendto(b"x", (OUTSIDE, 53)), lambda: udp.sendto(b"x", 0, (OUTSIDE, 53)),
                    lambda: udp6.sendto(b"x", ("2001:db8::1", 53)),
                    lambda: socket.create_connection((OUTSIDE, 80), timeout=1)]
        for attempt in attempts:
            with pytest.raises(network_guard.error, match=re.escape(OUTSIDE) + "|2001:db8::1"):
                attempt()
        for lookup in (lambda: socket.getaddrinfo("huggingface.co", 443), lambda: socket.gethostbyname("example.com"),
                       lambda: socket.create_connection(("example.com", 80), timeout=1)):
            with pytest.raises(network_guard.error, match=r"look up \(\w+\) '(huggingface\.co|example\.com)'"):
                lookup()
    finally:
        for sock in (tcp, udp, udp6):
            sock.close()
        network_guard.violations.clear()  # provoked on purpose: do not fail this test at teardown


def test_loopback_and_unix_sockets_pass_the_guard(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5), \
                socket.create_connection(("localhost", port), timeout=5):
            pass
    assert socket.getaddrinfo("localhost", 80) and socket.getaddrinfo(None, 80)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.sendto(b"x", ("127.0.0.1", 9))
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX) as listener, socket.socket(socket.AF_UNIX) as client:
        listener.bind(path)
        listener.listen()
        client.connect(path)


# A suite of one file beside a copy of the real conftest: the guard must fail its tests, swallowed or not.
_PROVOKING_TESTS = f'''
import socket, threading

def test_swallowed():
    try:
        socket.create_connection(("{OUTSIDE}", 80), timeout=1)
    except Exception:
        pass

def test_in_a_thread():
    thread = threading.Thread(target=lambda: socket.socket().connect_ex(("{OUTSIDE}", 443)))
    thread.start()
    thread.join()

def test_resolver():
    try:
        socket.getaddrinfo("pypi.org", 443)
    except BaseException:
        pass

def test_not_caught():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("{OUTSIDE}", 53))

def test_loopback_only():
    socket.socket().connect_ex(("127.0.0.1", 9))
'''


def test_a_swallowed_or_threaded_violation_still_fails_its_test(tmp_path):
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_provoking.py").write_text(_PROVOKING_TESTS)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
                           "ignore::pytest.PytestUnhandledThreadExceptionWarning", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"\b4 failed, 1 passed in\b", proc.stdout), proc.stdout[-3000:]  # failed once each, no error
    for test, target in (("test_swallowed", OUTSIDE), ("test_in_a_thread", OUTSIDE), ("test_resolver", "pypi.org")):
        assert re.search(rf"_ {test} _+\nnetwork guard: [^\n]*{re.escape(target)}", proc.stdout), proc.stdout[-3000:]
    assert re.search(rf"NetworkGuardError: network guard: a test tried to send a datagram to \('{re.escape(OUTSIDE)}'", proc.stdout)


# --- child processes: Ray's, traced ------------------------------------------------------------


def test_the_strace_parser_flags_what_leaves_loopback():
    trace = "\n".join([
        '101 connect(6, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("8.8.8.8")}, 16) = 0',
        '102 connect(23, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("169.254.169.254")}, 16 '
        '<unfinished ...>',
        '103 sendto(3, "\\1\\2", 2, 0, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 2',
        '[pid   104] connect(9, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), '
        'inet_pton(AF_INET6, "::ffff:192.0.2.2", &sin6_addr), sin6_scope_id=0}, 28) = 0',
        '105 connect(9, {sa_family=AF_INET, sa_data="\\0\\0"}, 16) = -1',  # unreadable: counts as outside
        # all of these stay on the machine
        '201 connect(5, {sa_family=AF_INET, sin_port=htons(6379), sin_addr=inet_addr("127.0.0.1")}, 16) = 0',
        '202 connect(5, {sa_family=AF_INET6, sin6_port=htons(80), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::1", '
        '&sin6_addr), sin6_scope_id=0}, 28) = 0',
        '203 connect(7, {sa_family=AF_UNIX, sun_path="/tmp/ray/session_latest/sockets/raylet"}, 110) = 0',
        '204 sendto(23, "GET / HTTP/1.1", 14, MSG_NOSIGNAL, NULL, 0) = 14',
        '205 sendmsg(4, {msg_name={sa_family=AF_NETLINK, nl_pid=0, nl_groups=00000000}, msg_namelen=12}, 0) = 20',
        '206 connect(8, {sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("127.8.0.1")}, 16) = 0',
        '207 +++ exited with 0 +++',
    ])
    assert non_loopback_targets(trace) == [
        "101 connect 8.8.8.8", "102 connect 169.254.169.254", "103 sendto 10.255.255.53",
        "104 connect ::ffff:192.0.2.2", '105 connect <unparsed: 9, {sa_family=AF_INET, sa_data="\\0\\0"}, 16) = -1>']


def _ray_local_run(tmp_path: Path, tiny_beir: Path) -> tuple[subprocess.CompletedProcess, str]:
    """`evaluate --engine ray --ray-local 1` under strace -f; (the process, the trace)."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is not installed, so nothing checks that Ray's processes stay on loopback: "
                    "install it (apt-get install strace; .ci/run does)", pytrace=False)
    # The user's environment, not the suite's: the harness must turn Ray's probes off by itself.
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("RAY_") and name.lower() not in ("http_proxy", "no_proxy")}
    trace = tmp_path / "trace.txt"
    command = [strace, "-f", "-qq", "-s", "120", "-e", "trace=connect,sendto,sendmsg,sendmmsg,execve", "-o", str(trace),
               sys.executable, "-m", "harness", "-q", "evaluate", str(tiny_beir), "--model", "hash:64",
               "--engine", "ray", "--ray-local", "1", "--cache-dir", str(tmp_path / "cache"),
               "--output-dir", str(tmp_path / "results")]
    proc = subprocess.run(command, cwd=tmp_path, env={**env, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=180)
    return proc, trace.read_text(errors="replace") if trace.exists() else ""


def test_a_ray_local_cluster_never_leaves_loopback(tmp_path, tiny_beir):
    proc, trace = _ray_local_run(tmp_path, tiny_beir)
    if proc.returncode != 0 and "ptrace" in proc.stderr and not trace:
        pytest.fail(f"strace cannot trace here ({proc.stderr.strip().splitlines()[0]}): run as root, or with "
                    "CAP_SYS_PTRACE, and not under another tracer", pytrace=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    started = set(re.findall(r'execve\("[^"]*/(raylet|gcs_server|default_worker\.py|dashboard\.py)"', trace)) | \
        set(re.findall(r'execve\("[^"]*python[^"]*", \[[^]]*/(default_worker\.py|dashboard\.py|agent\.py)"', trace))
    # The trace followed Ray's own processes (else a clean trace proves nothing).
    assert {"raylet", "gcs_server", "default_worker.py", "dashboard.py"} <= started, sorted(started)
    assert 'inet_addr("127.0.0.1")' in trace or "AF_UNIX" in trace
    outside = non_loopback_targets(trace)
    by_address = Counter(target.rsplit(" ", 1)[-1] for target in outside)
    assert not outside, (f"{len(outside)} connect/send calls left loopback ({dict(by_address.most_common())}), e.g.:\n"
                         + "\n".join(outside[:10]))
