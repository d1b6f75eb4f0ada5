"""An HTTP service that limits each client with RL.GCRA, on the ratelimit-redis-module package.

Every request costs one unit of the caller's limit: a burst of 5, then 10 per minute (one
every 6 s). The caller is the X-Client-Id header, or else the remote address. The middleware
adds the RateLimit headers; a refused request gets 429 with Retry-After and a problem+json
body; without Redis the service answers 503 (it fails closed).

    PORT=8080 REDIS_URL=redis://127.0.0.1:6379 python server.py
    curl -i -H 'X-Client-Id: alice' http://127.0.0.1:8080/

PORT=0 picks a free port; the first line on stdout says which.
"""

import os
import socket

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from ratelimit_redis_module import GCRA, RateLimitMiddleware, async_client_from_url, header

app = FastAPI()
app.add_middleware(
    RateLimitMiddleware,
    # The package's client for the request path: 50 ms to answer, and a refused connection
    # fails at once (redis-py's default client retries it with back-off, so every request
    # would wait the whole timeout while Redis is down). RESP2, so the replies are arrays (the
    # Node example reads RESP3 maps); either works.
    redis=async_client_from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"), protocol=2),
    limit=GCRA(burst=5, rate=10, period="1m"),
    key=header("x-client-id"),
    fail_open=False,
)


@app.get("/")
async def hello(request: Request) -> PlainTextResponse:
    client = request.headers.get("x-client-id") or request.client.host
    return PlainTextResponse(f"hello, {client}\n")


if __name__ == "__main__":
    # IPPROTO_TCP, not 0: asyncio turns Nagle off only on sockets that say TCP, and with it on
    # a keep-alive client would wait ~40 ms per request for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(os.environ.get("PORT", "8080"))))
    sock.listen(128)  # before saying where: a client may connect at once
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
