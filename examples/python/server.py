"""An HTTP service that limits each client with RL.GCRA, using redis-py.

Every request costs one unit of the caller's limit: a burst of 5, then 10 per minute (one
every 6 s). The caller is the X-Client-Id header, or else the remote address. The reply of
RL.GCRA becomes the RateLimit-* headers; a denied request gets 429 and Retry-After.

    PORT=8080 REDIS_URL=redis://127.0.0.1:6379 python server.py
    curl -i -H 'X-Client-Id: alice' http://127.0.0.1:8080/

PORT=0 picks a free port; the first line on stdout says which.
"""

import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import redis

BURST, RATE, PERIOD = 5, 10, "1m"
POLICY = f"{RATE};w=60;burst={BURST}"

# RESP2, so the reply is the five-integer array. (redis-py 8 speaks RESP3 unless told, and
# would get the map with a boolean `allowed` that the Node example reads.)
db = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"), protocol=2)


def ceil_seconds(ms):
    return -(-ms // 1000)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        client = self.headers.get("X-Client-Id") or self.client_address[0]
        try:
            # [allowed, limit, remaining, retry_after_ms, reset_after_ms]
            allowed, limit, remaining, retry_after_ms, reset_after_ms = db.execute_command(
                "RL.GCRA", f"rl:http:{client}", BURST, RATE, PERIOD
            )
        except redis.RedisError as e:
            # Fail closed: without the limiter, refuse rather than serve unlimited.
            self.log_error("redis: %s", e)
            self.reply(503, {}, "rate limiter unavailable\n")
            return

        headers = {
            "RateLimit-Limit": limit,
            "RateLimit-Remaining": remaining,
            "RateLimit-Reset": ceil_seconds(reset_after_ms),
            "RateLimit-Policy": POLICY,
        }
        if allowed:
            self.reply(200, headers, f"hello, {client}\n")
            return
        # retry_after_ms is -1 when the request can never pass (a cost above the burst).
        if retry_after_ms >= 0:
            headers["Retry-After"] = ceil_seconds(retry_after_ms)
        self.reply(429, headers, "too many requests\n")

    def reply(self, status, headers, body):
        data = body.encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, str(value))
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8080"))), Handler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
