// An HTTP service that limits each client with RL.GCRA, through the package in clients/node.
//
// Every request costs one unit of the caller's limit: a burst of 5, then 10 per minute (one
// every 6 s). The caller is the X-Client-Id header, or else the remote address. The package
// sets RateLimit-Policy, RateLimit and X-RateLimit-*, and refuses with 429 (Retry-After and a
// problem+json body); a denial is remembered in-process until its retry time.
//
//     PORT=8080 REDIS_URL=redis://127.0.0.1:6379 node server.js
//     curl -i -H 'X-Client-Id: alice' http://127.0.0.1:8080/
//
// PORT=0 picks a free port; the first line on stdout says which.

import http from 'node:http';
import { createClient } from 'redis';
import { rateLimitMiddleware, reconnectStrategy } from 'ratelimit-redis-module';

// disableOfflineQueue: while Redis is unreachable a command fails at once instead of waiting;
// reconnectStrategy: the package's, back within 100 ms of Redis (node-redis's own waits up to 2.2 s).
const db = createClient({
  url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  RESP: 3,
  disableOfflineQueue: true,
  socket: { reconnectStrategy },
});
db.on('error', (err) => console.error('redis:', err.message));
await db.connect();

const limit = rateLimitMiddleware({
  client: db,
  limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' },
  key: (req) => req.headers['x-client-id'] || req.socket.remoteAddress,
  failMode: 'closed', // without the limiter, refuse (503) rather than serve unlimited
  // How long a decision may take before failing closed: the package's default, 50 ms, unless
  // RATELIMIT_TIMEOUT_MS says (this repository's tests give a loaded machine 10 s).
  timeout: Number(process.env.RATELIMIT_TIMEOUT_MS) || 50,
});

const server = http.createServer((req, res) =>
  limit(req, res, () => {
    res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' });
    res.end(`hello, ${req.headers['x-client-id'] || req.socket.remoteAddress}\n`);
  }),
);
server.listen(Number(process.env.PORT ?? 8080), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
