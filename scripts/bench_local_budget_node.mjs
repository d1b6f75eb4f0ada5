#!/usr/bin/env node
// Local budgets in the Node client package (clients/node, issue 27): one hot key, 4 processes
// (child_process.fork of this file), each with BENCH_LB_CONCURRENCY (default 16) requests in
// flight through RateLimit.check for BENCH_LB_SECONDS (default 3) s; plain (a round trip per
// request) against localBudget: 64. A limit far above what is sent (never refused), so that the
// limiter's own cost is measured. Round trips counted by the module (INFO commandstats:
// RL.GCRA + RL.REFUND) over admitted requests; admissions per second over all processes (the sum
// of each process's admissions over its own running time: what comes after, close() and sending
// the latencies back, is not counted); the CPU time the processes spent per admission (user +
// system, process.cpuUsage over the same time: what a machine shared with others changes least);
// p50 / p99 of the time check() takes (the latency a request gains). Prints a markdown table.
// Not in the Makefile. Starts its own redis-server with the module (clients/node/test/helpers.js:
// RATELIMIT_MODULE, RATELIMIT_SERVER).

import { fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { RateLimit } from '../clients/node/index.js';
import { calls, connect, startRedis } from '../clients/node/test/helpers.js';

const PROCESSES = Number(process.env.BENCH_LB_PROCESSES ?? 4);
const CONCURRENCY = Number(process.env.BENCH_LB_CONCURRENCY ?? 16);
const SECONDS = Number(process.env.BENCH_LB_SECONDS ?? 3);
const K = Number(process.env.BENCH_LB_K ?? 64);
const LIMIT = { algorithm: 'gcra', burst: 1_000_000_000, rate: 1_000_000_000, period: '1s' };

async function worker() {
  const { url, k } = JSON.parse(process.argv[3]);
  const client = await connect({ url });
  const limiter = new RateLimit({
    client, limit: LIMIT, prefix: 'rl:bench:', timeout: 1000, logger: null, ...(k ? { localBudget: k } : {}),
  });
  process.send({ op: 'ready' });
  const [start] = await once(process, 'message');
  const began = performance.now();
  const cpu0 = process.cpuUsage();
  const until = began + start.ms;
  const latencies = [];
  let admitted = 0;
  let failed = 0;
  const loop = async () => {
    while (performance.now() < until) {
      const t = performance.now();
      const d = await limiter.check('hot');
      latencies.push(performance.now() - t);
      if (d.failed) failed += 1;
      else if (d.allowed) admitted += 1;
    }
  };
  await Promise.all(Array.from({ length: start.concurrency }, loop));
  const seconds = (performance.now() - began) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const cpuUs = cpu.user + cpu.system;
  await limiter.close();
  // Sent in full before the channel closes (a large message is written in pieces); a typed
  // array, which the 'advanced' serialization copies as it is.
  const message = { op: 'done', admitted, failed, seconds, cpuUs, latencies: Float64Array.from(latencies), stats: { ...limiter.stats } };
  await new Promise((r) => process.send(message, r));
  await client.quit();
  process.disconnect();
}

const percentile = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
const us = (ms) => `${Math.round(ms * 1000)} µs`;

async function mode(redis, client, k) {
  const children = [];
  for (let i = 0; i < PROCESSES; i++) {
    const child = fork(fileURLToPath(import.meta.url), ['worker', JSON.stringify({ url: redis.url, k })], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
    });
    children.push(child);
  }
  await Promise.all(children.map((c) => once(c, 'message')));
  const before = (await calls(client, 'RL.GCRA')) + (await calls(client, 'RL.REFUND'));
  const done = children.map((c) => once(c, 'message'));
  for (const c of children) c.send({ op: 'start', ms: SECONDS * 1000, concurrency: CONCURRENCY });
  const results = (await Promise.all(done)).map(([m]) => m);
  await Promise.all(children.map((c) => (c.exitCode === null ? once(c, 'exit') : undefined)));
  const roundTrips = (await calls(client, 'RL.GCRA')) + (await calls(client, 'RL.REFUND')) - before;
  const admitted = results.reduce((a, r) => a + r.admitted, 0);
  const failed = results.reduce((a, r) => a + r.failed, 0);
  const lat = new Float64Array(results.reduce((a, r) => a + r.latencies.length, 0));
  let at = 0;
  for (const r of results) {
    lat.set(r.latencies, at);
    at += r.latencies.length;
  }
  lat.sort();
  return {
    name: k ? `localBudget: ${k}` : 'plain',
    admitted,
    failed,
    perSecond: results.reduce((a, r) => a + r.admitted / r.seconds, 0),
    cpuPerAdmitted: results.reduce((a, r) => a + r.cpuUs, 0) / admitted,
    roundTrips,
    perAdmitted: roundTrips / admitted,
    p50: percentile(lat, 50),
    p99: percentile(lat, 99),
  };
}

if (process.argv[2] === 'worker') {
  await worker();
} else {
  const redis = await startRedis();
  const client = await connect(redis);
  try {
    const plain = await mode(redis, client, 0);
    const budget = await mode(redis, client, K);
    const rows = [plain, budget].map(
      (r) =>
        `| ${r.name} | ${r.admitted} | ${Math.round(r.perSecond)} | ${r.cpuPerAdmitted.toFixed(2)} µs | ${r.roundTrips} | ${r.perAdmitted.toFixed(4)} | ${us(r.p50)} | ${us(r.p99)} | ${r.failed} |`,
    );
    console.log(`One hot key, ${PROCESSES} processes, ${CONCURRENCY} requests in flight each, ${SECONDS} s a mode (GCRA, never refused).\n`);
    console.log('| mode | admitted | admissions/s | Node CPU / admitted | round trips | round trips / admitted | p50 check() | p99 check() | failed |');
    console.log('|---|---|---|---|---|---|---|---|---|');
    for (const row of rows) console.log(row);
    console.log(
      `\nlocalBudget: ${K}: ${(budget.perSecond / plain.perSecond).toFixed(1)}x the admissions/s (target >= 10x); ` +
        `${(budget.perAdmitted * 100).toFixed(2)}% round trips per admitted (target <= ${(100 / K + 1).toFixed(2)}%).`,
    );
  } finally {
    await client.quit();
    await redis.stop();
  }
}
