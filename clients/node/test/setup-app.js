// The application of setup.test.js's fresh processes: what a user writes, with the package's
// defaults (backend "auto", timeout 50 ms), on node-redis: connect, put the limit in front of a
// route, listen. It prints its port once listening ({"port":n}), and counts each request as it
// reaches it, before the limit, in Redis on the same client (`INCR requests`, not waited for, as
// an application keeps a hit counter): the parent's proxy reads that on the connection the
// limiter's commands take, so it knows, in the order the process sent them, which came before
// the request. Run any other way (node --test runs every file under test/), it does nothing.
//
// RL_SETUP_APP says which application: `express` (rateLimitMiddleware in Express), `http`
// (rateLimitMiddleware in a plain node:http handler) or `flexible` (RateLimiterRedis in
// Express, as rate-limiter-flexible's README writes it: X-RateLimit-* from the RateLimiterRes,
// 429 on a refusal). RL_URL is the server's address.

import http from 'node:http';
import express from 'express';
import { createClient } from 'redis';
import { RateLimiterRedis, rateLimitMiddleware } from '../index.js';

const kind = process.env.RL_SETUP_APP;
if (kind !== undefined) {
  const client = createClient({ url: process.env.RL_URL });
  client.on('error', (e) => console.error(`redis: ${e.message}`));
  await client.connect();
  const limit = { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' };
  const arrived = () => client.incr('requests').catch(() => {});
  let server;
  if (kind === 'express') {
    const app = express();
    app.use((req, res, next) => { arrived(); next(); });
    app.use(rateLimitMiddleware({ client, limit, timeout: 60_000 }));
    app.get('/', (req, res) => res.send('hello'));
    server = http.createServer(app);
  } else if (kind === 'http') {
    const limited = rateLimitMiddleware({ client, limit, timeout: 60_000 });
    server = http.createServer((req, res) => {
      arrived();
      limited(req, res, () => res.end('hello'));
    });
  } else if (kind === 'flexible') {
    const points = 5;
    const limiter = new RateLimiterRedis({ storeClient: client, points, duration: 60 });
    const app = express();
    app.use((req, res, next) => { arrived(); next(); });
    app.use((req, res, next) => {
      limiter.consume(req.ip).then(
        (r) => {
          res.set({ 'X-RateLimit-Limit': points, 'X-RateLimit-Remaining': r.remainingPoints });
          res.set('X-RateLimiter-Res', JSON.stringify(r));
          next();
        },
        (r) => (r instanceof Error ? next(r) : res.status(429).send('Too Many Requests')),
      );
    });
    app.get('/', (req, res) => res.send('hello'));
    server = http.createServer(app);
  } else {
    throw new Error(`RL_SETUP_APP: no application named ${kind}`);
  }
  server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port })));
}
