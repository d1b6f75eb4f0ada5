// The node:cluster application of local-budget-cluster.test.js (forked by it): a primary that
// forks RL_WORKERS (default 4) workers, each an Express app with rateLimitMiddleware and
// `localBudget` on one shared key, all listening on one port (the primary hands out the
// connections). Each response says which worker answered (X-Worker-Pid); GET /held (not
// limited) answers the worker's pid, the units its budget holds and what it admitted. SIGTERM to
// the primary: it sends SIGTERM to every worker left, each stops listening, closes its limiter
// (giving back what it holds), tells the primary what it gave back, and exits; then the primary
// tells its parent and exits. Run any other way (node --test runs every file under test/), it does
// nothing.

import cluster from 'node:cluster';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

if (process.env.RL_LB_CLUSTER === '1' && cluster.isPrimary && typeof process.send === 'function') {
  const n = Number(process.env.RL_WORKERS ?? 4);
  cluster.setupPrimary({ exec: fileURLToPath(import.meta.url) });
  const workers = Array.from({ length: n }, () => cluster.fork({ RL_LB_CLUSTER_WORKER: '1' }));
  const closed = [];
  cluster.on('message', (w, m) => {
    if (m?.op === 'closed') closed.push(m);
  });
  cluster.on('exit', (w, code, signal) => process.send({ op: 'exit', pid: w.process.pid, code, signal }));
  const addresses = await Promise.all(workers.map((w) => once(w, 'listening').then(([address]) => address)));
  process.once('SIGTERM', async () => {
    const alive = workers.filter((w) => !w.isDead());
    const gone = alive.map((w) => once(w, 'exit'));
    // A signal, not worker.kill(): that disconnects first, and the worker could not report.
    for (const w of alive) w.process.kill('SIGTERM');
    await Promise.all(gone);
    process.send({ op: 'stopped', closed }, () => process.exit(0));
  });
  process.send({ op: 'ready', ports: addresses.map((a) => a.port), pids: workers.map((w) => w.process.pid) });
} else if (process.env.RL_LB_CLUSTER_WORKER === '1' && cluster.isWorker) {
  const { default: express } = await import('express');
  const { createClient } = await import('redis');
  const { rateLimitMiddleware } = await import('../index.js');
  const { RL_URL, RL_LIMIT, RL_K, RL_HOLD, RL_PREFIX } = process.env;
  const client = createClient({ url: RL_URL, RESP: 3, disableOfflineQueue: true });
  client.on('error', () => {});
  await client.connect();
  const limit = rateLimitMiddleware({
    client,
    limit: JSON.parse(RL_LIMIT),
    prefix: RL_PREFIX,
    localBudget: Number(RL_K),
    hold: RL_HOLD || undefined,
    key: () => 'shared',
    timeout: 60_000, // a busy machine is not a failure: none is counted here
    logger: null,
  });
  const { stats } = limit.limiter;
  const app = express();
  app.use((req, res, next) => {
    res.setHeader('X-Worker-Pid', String(process.pid));
    next();
  });
  app.get('/held', (req, res) => res.json({ pid: process.pid, held: stats.held, admitted: stats.admitted }));
  app.use(limit);
  app.get('/', (req, res) => res.send('hello'));
  const server = app.listen(0, '127.0.0.1');
  process.once('SIGTERM', async () => {
    await new Promise((r) => {
      server.close(r);
      server.closeIdleConnections();
    });
    const held = stats.held;
    const refunded = await limit.limiter.close();
    process.send({ op: 'closed', pid: process.pid, held, refunded, admitted: stats.admitted }, async () => {
      await client.quit();
      process.exit(0);
    });
  });
}
