#!/usr/bin/env node
// `make bench`, the Node client package (clients/node): what its middleware adds per request.
//
// Starts its own redis-server with the module (clients/node/test/helpers.js: a free loopback
// port, stopped by PID) and three HTTP services on node:http, each on its own loopback port:
//   (a) bare: answers at once;
//   (b) direct: calls RL.GCRA itself (node-redis, RESP3) and sets the five numbers as headers;
//   (c) middleware: rateLimitMiddleware in front of (a);
//   (d) the middleware on a sliding window, whose RateLimit t takes a second call (a DRYRUN).
// One client sends requests one after another on a keep-alive connection, rounds interleaved
// (a, b, c, a, b, c...) so that noise spreads over all three; p50 and p99 per request in each
// round, and their medians over the rounds (one busy moment on a shared machine moves one
// round's p99, not the median).
// Then a hammering client: one caller sending requests as fast as it can to a limit it is
// over, with the denial memory on and off; RL.GCRA calls counted with INFO commandstats.
// Prints a report (and writes it to target/bench/clients_node.md). BENCH_NODE_N (default
// 2000) is the requests per round, BENCH_NODE_ROUNDS (default 7) the rounds.

import { mkdirSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { rateLimitMiddleware } from '../clients/node/index.js';
import { calls, connect, startRedis } from '../clients/node/test/helpers.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const N = Number(process.env.BENCH_NODE_N ?? 2000);
const ROUNDS = Number(process.env.BENCH_NODE_ROUNDS ?? 7);
const HAMMER = 5000;

async function listen(handler) {
  const server = http.createServer(handler);
  server.keepAliveTimeout = 60_000;
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return server;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
function request(port, id) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/', agent, headers: { 'X-Client-Id': id } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
  });
}

/** Latencies (ms) of n requests in a row. */
async function run(port, n, id) {
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await request(port, id);
    out[i] = performance.now() - t;
  }
  return out;
}

const percentile = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
const us = (ms) => `${Math.round(ms * 1000)} µs`;

const redis = await startRedis();
const client = await connect(redis);
const servers = [];
try {
  // Never refused: a burst and rate far above what one client sends.
  const big = { algorithm: 'gcra', burst: 1_000_000_000, rate: 1_000_000_000, period: '1s' };
  const hello = (req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end('hello');
  };
  const bare = await listen(hello);
  const direct = await listen(async (req, res) => {
    const r = await client.sendCommand(['RL.GCRA', `rl:direct:${req.headers['x-client-id']}`, '1000000000', '1000000000', '1s']);
    res.setHeader('X-RateLimit-Limit', r.limit);
    res.setHeader('X-RateLimit-Remaining', r.remaining);
    res.setHeader('X-RateLimit-Reset', Math.ceil(r.reset_after_ms / 1000));
    hello(req, res);
  });
  const mw = rateLimitMiddleware({ client, limit: big, key: (req) => req.headers['x-client-id'] });
  const withMiddleware = await listen((req, res) => mw(req, res, () => hello(req, res)));
  const sliding = rateLimitMiddleware({
    client, limit: { algorithm: 'slidingwindow', limit: 1_000_000_000_000, window: '1s' }, key: (req) => req.headers['x-client-id'], prefix: 'rl:sliding:',
  });
  const withSliding = await listen((req, res) => sliding(req, res, () => hello(req, res)));
  servers.push(bare, direct, withMiddleware, withSliding);
  const cases = [
    ['bare endpoint', bare], ['RL.GCRA called directly', direct], ['middleware', withMiddleware],
    ['middleware, sliding window (t from a DRYRUN)', withSliding],
  ];

  for (const [, s] of cases) await run(s.address().port, 300, 'warm'); // warm-up
  const rounds = cases.map(() => ({ p50: [], p99: [] }));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, [, s]] of cases.entries()) {
      const sorted = (await run(s.address().port, N, `c${round}`)).sort();
      rounds[i].p50.push(percentile(sorted, 50));
      rounds[i].p99.push(percentile(sorted, 99));
    }
  }
  const median = (xs) => Float64Array.from(xs).sort()[Math.floor(xs.length / 2)];
  const stats = rounds.map((r) => ({ p50: median(r.p50), p99: median(r.p99) }));

  // The hammering client: burst 5, then 1 a minute; HAMMER requests in a row, all but 5 refused.
  const hammer = {};
  for (const memory of [10_000, 0]) {
    const m = rateLimitMiddleware({
      client,
      limit: { algorithm: 'gcra', burst: 5, rate: 1, period: '1m' },
      key: (req) => req.headers['x-client-id'],
      prefix: `rl:hammer:${memory}:`,
      denialMemory: memory,
    });
    const s = await listen((req, res) => m(req, res, () => hello(req, res)));
    servers.push(s);
    const before = await calls(client, 'RL.GCRA');
    await run(s.address().port, HAMMER, 'mallory');
    hammer[memory] = { calls: (await calls(client, 'RL.GCRA')) - before, local: m.limiter.stats.deniedLocally };
  }

  const rows = cases.map(([name], i) => `| ${name} | ${us(stats[i].p50)} | ${us(stats[i].p99)} |`);
  const added = (i, j, p) => us(stats[i][p] - stats[j][p]);
  const report = [
    '# The Node client package: added latency per request',
    '',
    `node ${process.version}, one client, keep-alive, ${ROUNDS} rounds of ${N} requests per case, interleaved;`,
    'the median over the rounds of each round\'s p50 and p99.',
    '',
    '| case | p50 | p99 |',
    '|---|---|---|',
    ...rows,
    '',
    `The middleware adds ${added(2, 0, 'p50')} (p50) and ${added(2, 0, 'p99')} (p99) to a bare endpoint, ` +
      `and ${added(2, 1, 'p50')} (p50) and ${added(2, 1, 'p99')} (p99) to the endpoint that calls RL.GCRA itself.`,
    `On a sliding window, whose t the reply does not give, the DRYRUN that finds it adds ${added(3, 2, 'p50')} (p50).`,
    '',
    `A hammering client: ${HAMMER} requests in a row to a limit of 5 then 1 a minute.`,
    '',
    '| denial memory | RL.GCRA calls | refused locally |',
    '|---|---|---|',
    `| on (10,000 entries) | ${hammer[10_000].calls} | ${hammer[10_000].local} |`,
    `| off | ${hammer[0].calls} | ${hammer[0].local} |`,
    '',
    `Round trips saved: ${hammer[0].calls - hammer[10_000].calls} of ${hammer[0].calls}.`,
    '',
  ].join('\n');
  console.log(report);
  mkdirSync(path.join(ROOT, 'target/bench'), { recursive: true });
  writeFileSync(path.join(ROOT, 'target/bench/clients_node.md'), report);
} finally {
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
  agent.destroy();
  await client.quit();
  await redis.stop();
}
