"""The readiness wait of an engine the command starts: a server that refuses connections while it
starts is "not up yet", never "no network" — the command's memory of unreachable hosts (which
stops a command with forty sources after the first refusal) must not end the wait, nor the
requests made to the engine once it answers."""

from __future__ import annotations

import subprocess
import sys
import time

import requests

from patchset.upstream import net
from patchset.upstream.net.budget import command_budget
from patchset.verify.engines.launch import free_port, wait_ready

LATE_SERVER = """
import http.server, sys, time
time.sleep(float(sys.argv[2]))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_server_that_refuses_while_it_starts_is_waited_for_within_a_command() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/ready"
    proc = subprocess.Popen([sys.executable, "-c", LATE_SERVER, str(port), "1.5"])
    try:
        with command_budget():
            t0 = time.monotonic()
            assert wait_ready(proc, url, t0 + 30) is None
            assert time.monotonic() - t0 >= 1.0  # it was refused at first, and waited
            answer = net.request(net.session(trust_env=False), "GET", url, what="test", charge=False)
            assert answer.status == 200 and answer.body == b"ok"
    finally:
        proc.kill()
        proc.wait()


def test_a_charged_request_refused_still_marks_the_host_down() -> None:
    """The other side of the rule: the network (charged requests) is asked once."""
    url = f"http://127.0.0.1:{free_port()}/x"
    with command_budget():
        try:
            net.request(net.session(trust_env=False), "GET", url, what="test")
        except requests.RequestException:
            pass
        assert net.down(url) == "connection refused"
        try:
            net.request(net.session(trust_env=False), "GET", url, what="test")
        except net.Unreachable as exc:
            assert "stopped asking this host" in exc.hint
        else:
            raise AssertionError("the second request to a refused host was sent")


def test_a_start_command_that_exits_is_reported_with_its_code() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    url = f"http://127.0.0.1:{free_port()}/ready"
    with command_budget():
        assert wait_ready(proc, url, time.monotonic() + 30) == 3
