"""The suite stays on the loopback interface, and both guards that say so can fail.

* In the pytest process: `tests/conftest.py` wraps socket connects, UDP sends and resolver lookups;
  leaving loopback raises NetworkGuardError and fails the test, even when the code swallowed the error.
* In child processes (Ray's GCS, raylet, dashboard, agents and workers, which the in-process guard
  cannot see): a `--ray-local` run traced with `strace -f`, every connect/sendto/sendmsg target checked.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tracing import NETWORK_CALLS, check_stayed_home, non_loopback_targets, traced

TESTS = Path(__file__).parent
ROOT = TESTS.parent
OUTSIDE = "10.255.255.1"  # a private address nothing here serves: the guard must stop us before the kernel

# --- the in-process guard ------------------------------------------------------------------------


def test_the_guard_refuses_every_way_out_of_loopback(network_guard):
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        attempts = [
            lambda: tcp.connect((OUTSIDE, 80)),
            lambda: tcp.connect_ex((OUTSIDE, 80)),
            lambda: udp.sendto(b"x", (OUTSIDE, 53)),
            lambda: udp.sendto(b"x", 0, (OUTSIDE, 53)),
            lambda: udp6.sendto(b"x", ("2001:db8::1", 53)),
            lambda: socket.create_connection((OUTSIDE, 80), timeout=1),
        ]
        for attempt in attempts:
            with pytest.raises(network_guard.error, match=re.escape(OUTSIDE) + "|2001:db8::1"):
                attempt()
        for lookup in (
            lambda: socket.getaddrinfo("huggingface.co", 443),
            lambda: socket.gethostbyname("example.com"),
            lambda: socket.create_connection(("example.com", 80), timeout=1),
        ):
            with pytest.raises(network_guard.error, match=r"look up \(\w+\) '(huggingface\.co|example\.com)'"):
                lookup()
    finally:
        for sock in (tcp, udp, udp6):
            sock.close()
        network_guard.violations.clear()  # provoked on purpose: do not fail this test at teardown


def test_loopback_and_unix_sockets_pass_the_guard(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5),
            socket.create_connection(("localhost", port), timeout=5),
        ):
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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore::pytest.PytestUnhandledThreadExceptionWarning",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"\b4 failed, 1 passed in\b", proc.stdout), proc.stdout[-3000:]  # failed once each, no error
    for test, target in (("test_swallowed", OUTSIDE), ("test_in_a_thread", OUTSIDE), ("test_resolver", "pypi.org")):
        assert re.search(rf"_ {test} _+\nnetwork guard: [^\n]*{re.escape(target)}", proc.stdout), proc.stdout[-3000:]
    assert re.search(
        rf"NetworkGuardError: network guard: a test tried to send a datagram to \('{re.escape(OUTSIDE)}'", proc.stdout
    )


_SESSION_FIXTURE_LEAK = f'''
import socket
import pytest

@pytest.fixture(scope="session")
def leaky():
    try:
        socket.create_connection(("{OUTSIDE}", 80), timeout=1)  # outside any test's body: no test owns it
    except Exception:
        pass

def test_uses_the_leaky_fixture(leaky):
    pass
'''


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_violation_no_test_owns_still_fails_the_run(tmp_path, workers):
    """A leak in a session-scoped fixture (outside every test's body) fails the whole run at its end, and the
    run still writes its outcomes file: one session-end hook does both (a second one would replace the first).
    With pytest-xdist's workers too: a worker hands its violations to the controller, which fails the run."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_session_leak.py").write_text(_SESSION_FIXTURE_LEAK)
    outcomes = tmp_path / "outcomes.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers, str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "BEIR_HARNESS_TEST_OUTCOMES": str(outcomes)},
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout and OUTSIDE in proc.stdout  # the test passed; the run did not
    assert "test_uses_the_leaky_fixture" in outcomes.read_text()


# --- child processes: Ray's, traced ------------------------------------------------------------


def test_a_call_refused_for_want_of_a_route_passes_only_when_allowed():
    trace = "\n".join(
        [
            "301 connect(24, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "
            '"2001:4860:4860::8888", &sin6_addr), sin6_scope_id=0}, 28) = -1 EADDRNOTAVAIL (Cannot assign requested address)',
            '302 connect(23, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16 <unfinished ...>',
            '303 connect(9, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("192.0.2.7")}, 16 <unfinished ...>',
            "302 <... connect resumed>) = -1 ENETUNREACH (Network is unreachable)",
            "303 <... connect resumed>) = 0",
        ]
    )
    assert non_loopback_targets(trace) == [
        "301 connect 2001:4860:4860::8888",
        "302 connect 10.255.255.53",
        "303 connect 192.0.2.7",
    ]
    assert non_loopback_targets(trace, unreachable_ok=True) == ["303 connect 192.0.2.7"]


def test_the_strace_parser_flags_what_leaves_loopback():
    trace = "\n".join(
        [
            '101 connect(6, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("8.8.8.8")}, 16) = 0',
            '102 connect(23, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("169.254.169.254")}, 16 '
            "<unfinished ...>",
            '103 sendto(3, "\\1\\2", 2, 0, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 2',
            "[pid   104] connect(9, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), "
            'inet_pton(AF_INET6, "::ffff:192.0.2.2", &sin6_addr), sin6_scope_id=0}, 28) = 0',
            '105 connect(9, {sa_family=AF_INET, sa_data="\\0\\0"}, 16) = -1',  # unreadable: counts as outside
            # all of these stay on the machine
            '201 connect(5, {sa_family=AF_INET, sin_port=htons(6379), sin_addr=inet_addr("127.0.0.1")}, 16) = 0',
            '202 connect(5, {sa_family=AF_INET6, sin6_port=htons(80), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::1", '
            "&sin6_addr), sin6_scope_id=0}, 28) = 0",
            '203 connect(7, {sa_family=AF_UNIX, sun_path="/tmp/ray/session_latest/sockets/raylet"}, 110) = 0',
            '204 sendto(23, "GET / HTTP/1.1", 14, MSG_NOSIGNAL, NULL, 0) = 14',
            "205 sendmsg(4, {msg_name={sa_family=AF_NETLINK, nl_pid=0, nl_groups=00000000}, msg_namelen=12}, 0) = 20",
            '206 connect(8, {sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("127.8.0.1")}, 16) = 0',
            "207 +++ exited with 0 +++",
        ]
    )
    assert non_loopback_targets(trace) == [
        "101 connect 8.8.8.8",
        "102 connect 169.254.169.254",
        "103 sendto 10.255.255.53",
        "104 connect ::ffff:192.0.2.2",
        '105 connect <unparsed: 9, {sa_family=AF_INET, sa_data="\\0\\0"}, 16) = -1>',
    ]


def _ray_local_run(tmp_path: Path, tiny_beir: Path) -> tuple[subprocess.CompletedProcess, str]:
    """`evaluate --engine ray --ray-local 1` under strace -f; (the process, the trace)."""
    # The user's environment, not the suite's: the harness must turn Ray's probes off by itself.
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("RAY_") and name.lower() not in ("http_proxy", "no_proxy")
    }
    trace = tmp_path / "trace.txt"
    command = traced(
        [
            sys.executable,
            "-m",
            "harness",
            "-q",
            "evaluate",
            str(tiny_beir),
            "--model",
            "hash:64",
            "--engine",
            "ray",
            "--ray-local",
            "1",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "results"),
        ],
        trace,
        NETWORK_CALLS + ",execve",
    )
    proc = subprocess.run(
        command,
        cwd=tmp_path,
        env={**env, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    return proc, trace.read_text(errors="replace") if trace.exists() else ""


def test_a_ray_local_cluster_never_leaves_loopback(tmp_path, tiny_beir):
    proc, trace = _ray_local_run(tmp_path, tiny_beir)
    if proc.returncode != 0 and "ptrace" in proc.stderr and not trace:
        pytest.fail(
            f"strace cannot trace here ({proc.stderr.strip().splitlines()[0]}): run as root, or with "
            "CAP_SYS_PTRACE, and not under another tracer",
            pytrace=False,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    started = set(re.findall(r'execve\("[^"]*/(raylet|gcs_server|default_worker\.py|dashboard\.py)"', trace)) | set(
        re.findall(r'execve\("[^"]*python[^"]*", \[[^]]*/(default_worker\.py|dashboard\.py|agent\.py)"', trace)
    )
    # The trace followed Ray's own processes (else a clean trace proves nothing).
    assert {"raylet", "gcs_server", "default_worker.py", "dashboard.py"} <= started, sorted(started)
    assert 'inet_addr("127.0.0.1")' in trace or "AF_UNIX" in trace
    outside = non_loopback_targets(trace)
    by_address = Counter(target.rsplit(" ", 1)[-1] for target in outside)
    assert not outside, (
        f"{len(outside)} connect/send calls left loopback ({dict(by_address.most_common())}), e.g.:\n"
        + "\n".join(outside[:10])
    )


# --- child processes: Chromium, OpenVINO and NNCF, traced ------------------------------------------


def test_the_browser_tests_never_leave_loopback(tmp_path):
    """Two of the suite's browser tests (the report page, the judging page) run again under strace -f: Chromium's
    browser, renderer, network and GPU processes make no connect or send outside loopback.

    Chromium runs in a network namespace of its own (`tests/browser.py`), where its IPv6 reachability probe (a UDP
    connect to a public address, made on some starts whatever the flags) finds no route and fails: that one kind
    of call, refused by the kernel, sends nothing and passes; any other fails this test.
    """
    import browser

    if not browser.available():
        pytest.skip("no /usr/bin/chromium with Playwright (.ci/run installs Debian's chromium package)")
    assert browser.executable() != str(browser.CHROMIUM), "Chromium cannot get a network namespace of its own here"
    trace = tmp_path / "trace.txt"
    tests = [
        f"{TESTS}/test_html_report.py::test_sorting_switching_and_a_drill_down_in_chromium",
        f"{TESTS}/test_judge_page.py::test_keys_grade_a_reload_keeps_the_work_and_the_export_is_what_was_typed",
    ]
    command = traced(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], trace, NETWORK_CALLS + ",execve"
    )
    proc = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    text = trace.read_text(errors="replace")
    assert re.search(r'execve\("[^"]*/chromium"', text), "the trace did not follow Chromium"
    assert "--type=renderer" in text  # its child processes too, not only the browser process
    check_stayed_home(text, "Chromium", unreachable_ok=True)


def test_openvino_int8_sends_nothing_and_writes_nothing_under_home(tmp_path, tiny_bert, tiny_beir):
    """`evaluate --backend openvino-int8` with an empty HOME and neither CI switch set, traced: no DNS query, no
    connect outside loopback, and no ~/intel (OpenVINO's telemetry client id and counters)."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    model = tiny_bert(["alpha", "beta", "gamma", "delta", "first", "second", "document", "query"])
    home = tmp_path / "home"
    home.mkdir()
    env = {
        name: value for name, value in os.environ.items() if name not in ("CI", "NNCF_CI", "TF_BUILD", "JENKINS_URL")
    }
    trace = tmp_path / "trace.txt"
    command = traced(
        [
            sys.executable,
            "-m",
            "harness",
            "-q",
            "evaluate",
            str(tiny_beir),
            "--model",
            str(model),
            "--backend",
            "openvino-int8",
            "--json",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "results"),
        ],
        trace,
    )
    proc = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"openvino-int8"' in proc.stdout  # it ran the OpenVINO int8 path (NNCF quantized the tiny model)
    check_stayed_home(trace.read_text(errors="replace"), "evaluate --backend openvino-int8")
    assert sorted(path.name for path in home.iterdir()) == [], "written under the empty HOME"


def test_importing_openvino_the_harness_way_declines_its_telemetry(tmp_path):
    """`openvino_module()` alone, traced: OpenVINO's own import (not only NNCF's) sends nothing, writes no ~/intel."""
    pytest.importorskip("openvino")
    env = {name: value for name, value in os.environ.items() if name not in ("CI", "NNCF_CI")}
    trace = tmp_path / "trace.txt"
    code = (
        "from harness.runtimes.openvino_backend import openvino_module; import os; openvino_module(); "
        "import openvino_telemetry as t; print(t.Telemetry().consent, os.environ.get('CI'))"
    )
    proc = subprocess.run(
        traced([sys.executable, "-c", code], trace),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False", "None"]  # declined; the environment restored after the import
    check_stayed_home(trace.read_text(errors="replace"), "import openvino")
    assert not (tmp_path / "intel").exists()


# --- CI: the whole suite in a network namespace that holds only loopback ----------------------------


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="CI only: .ci/run starts the suite inside unshare -n")
def test_in_ci_the_suite_runs_where_only_loopback_exists():
    """.ci/run runs pytest inside `unshare -n` with `lo` up: a leak the guards miss has nowhere to go. This fails
    when that namespace is not in effect (another interface is visible, or loopback is down)."""
    names = sorted(name for _, name in socket.if_nameindex())
    assert names == ["lo"], f"network interfaces visible to the suite: {names} (.ci/run must use unshare -n)"
    flags = int(Path("/sys/class/net/lo/flags").read_text(), 16)
    assert flags & 0x1, "loopback is down in the suite's namespace (.ci/run: ip link set lo up)"
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname(), timeout=5):
        pass
