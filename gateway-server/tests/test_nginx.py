"""The HTTP check behind a real NGINX (Debian's) with `auth_request`, configured as
docs/gateway.md shows: the descriptors from the request's headers, a refusal as 403 (the only
refusal auth_request takes besides 401) turned into a 429 with the rate limit fields."""

from __future__ import annotations

import http.client
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

RULES = """
domain: site
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
"""

# What docs/gateway.md gives, with this test's folders and ports.
CONF = """
master_process off;
daemon off;
error_log {dir}/error.log;
pid {dir}/nginx.pid;
events {{}}
http {{
  access_log off;
  client_body_temp_path {dir}/tmp;
  proxy_temp_path {dir}/tmp;
  fastcgi_temp_path {dir}/tmp;
  uwsgi_temp_path {dir}/tmp;
  scgi_temp_path {dir}/tmp;
  server {{
    listen 127.0.0.1:{port};
    root {dir}/www;
    # The gateway's fields on every answer, the refusal's too.
    add_header RateLimit-Policy $ratelimit_policy always;
    add_header RateLimit $ratelimit always;
    add_header Retry-After $ratelimit_retry_after always;
    location / {{
      auth_request /ratelimit;
      auth_request_set $ratelimit_policy $upstream_http_ratelimit_policy;
      auth_request_set $ratelimit $upstream_http_ratelimit;
      auth_request_set $ratelimit_retry_after $upstream_http_retry_after;
      error_page 403 = @too_many_requests;
    }}
    location = /ratelimit {{
      internal;
      proxy_pass http://127.0.0.1:{gateway}/check/site?refuse=403;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-RateLimit-Descriptor "user=$http_x_user";
    }}
    location @too_many_requests {{
      return 429 "Too Many Requests\\n";
    }}
  }}
}}
"""


@pytest.fixture
def nginx(tmp_path: Path, gateways):
    g = gateways({"site.yaml": RULES}, {"RATELIMIT_HEADERS": "draft-11"})
    port = free_port()
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_text("hello\n")
    (tmp_path / "tmp").mkdir()
    conf = tmp_path / "nginx.conf"
    conf.write_text(CONF.format(dir=tmp_path, port=port, gateway=g.http_port))
    proc = subprocess.Popen([NGINX, "-p", str(tmp_path), "-c", str(conf)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            with __import__("socket").create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp_path / "error.log").read_text() if (tmp_path / "error.log").exists() else "nginx did not start")
            time.sleep(0.02)
    yield port
    proc.kill()
    proc.wait(10)


def get(port: int, user: str) -> tuple[int, str, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", "/index.html", headers={"X-User": user})
        r = conn.getresponse()
        return r.status, r.read().decode(), {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()


def test_nginx_auth_request(nginx) -> None:
    first = get(nginx, "alice")
    assert first[:2] == (200, "hello\n")
    assert first[2]["ratelimit-policy"] == '"site.user";q=2;w=60'
    assert first[2]["ratelimit"] == '"site.user";r=1;t=40'
    assert get(nginx, "alice")[0] == 200
    refused = get(nginx, "alice")
    assert refused[:2] == (429, "Too Many Requests\n")
    assert refused[2]["ratelimit"] == '"site.user";r=0;t=40'
    assert refused[2]["retry-after"] == "40"
    assert get(nginx, "bob")[0] == 200
