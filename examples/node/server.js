// An HTTP service that limits each client with RL.GCRA, using node-redis over RESP3.
//
// Every request costs one unit of the caller's limit: a burst of 5, then 10 per minute (one
// every 6 s). The caller is the X-Client-Id header, or else the remote address. The reply of
// RL.GCRA becomes the RateLimit-* headers; a denied request gets 429 and Retry-After.
//
//     PORT=8080 REDIS_URL=redis://127.0.0.1:6379 node server.js
//     curl -i -H 'X-Client-Id: alice' http://127.0.0.1:8080/
//
// PORT=0 picks a free port; the first line on stdout says which.

import http from 'node:http';
import { createClient } from 'redis';

const BURST = 5, RATE = 10, PERIOD = '1m';
const POLICY = `${RATE};w=60;burst=${BURST}`;

// RESP3, so the reply is a map with a boolean `allowed`. disableOfflineQueue: while Redis is
// unreachable a command fails at once (a 503) instead of waiting for the reconnection.
const db = createClient({
  url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  RESP: 3,
  disableOfflineQueue: true,
});
db.on('error', (err) => console.error('redis:', err.message));
await db.connect();

const ceilSeconds = (ms) => Math.ceil(ms / 1000);

const server = http.createServer(async (req, res) => {
  const client = req.headers['x-client-id'] || req.socket.remoteAddress;
  let reply;
  try {
    // RESP3: a map { allowed: boolean, limit, remaining, retry_after_ms, reset_after_ms }.
    reply = await db.sendCommand(['RL.GCRA', `rl:http:${client}`, `${BURST}`, `${RATE}`, PERIOD]);
  } catch (err) {
    // Fail closed: without the limiter, refuse rather than serve unlimited.
    console.error('redis:', err.message);
    res.writeHead(503, { 'Content-Type': 'text/plain; charset=utf-8' });
    res.end('rate limiter unavailable\n');
    return;
  }

  const headers = {
    'RateLimit-Limit': reply.limit,
    'RateLimit-Remaining': reply.remaining,
    'RateLimit-Reset': ceilSeconds(reply.reset_after_ms),
    'RateLimit-Policy': POLICY,
    'Content-Type': 'text/plain; charset=utf-8',
  };
  if (reply.allowed) {
    res.writeHead(200, headers);
    res.end(`hello, ${client}\n`);
    return;
  }
  // retry_after_ms is -1 when the request can never pass (a cost above the burst).
  if (reply.retry_after_ms >= 0) headers['Retry-After'] = ceilSeconds(reply.retry_after_ms);
  res.writeHead(429, headers);
  res.end('too many requests\n');
});

server.listen(Number(process.env.PORT ?? 8080), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
