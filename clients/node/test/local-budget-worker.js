// A worker process of the local budget tests (child_process.fork): one RateLimit with a local
// budget on the key the parent names, checking as many requests as it is told and reporting what
// it admitted and holds; `close` gives back what it holds and exits. Run any other way (node
// --test runs every file under test/), it does nothing. `budgetWorker` forks one.

import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';
import { RateLimit } from '../index.js';

/**
 * A worker process with a local budget of `k` on `limit` (`hold`: a duration, default the
 * limit's), on the server at `url`; `ask(message)` resolves its reply: `{ op: 'run', key, n,
 * concurrency, cost }` runs n checks, concurrency at a time, and answers the counts so far
 * (admitted in units) and the limiter's stats (held among them); `{ op: 'close' }` closes the
 * limiter (answering `refunded`) and exits.
 */
export async function budgetWorker(url, limit, k, { prefix = 'rl:lb:', hold } = {}) {
  const child = fork(fileURLToPath(import.meta.url), [], {
    env: {
      ...process.env,
      RL_LB_WORKER: '1',
      RL_URL: url,
      RL_LIMIT: JSON.stringify(limit),
      RL_K: String(k),
      RL_HOLD: hold ?? '',
      RL_PREFIX: prefix,
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const [ready] = await once(child, 'message');
  assert.equal(ready.op, 'ready');
  return {
    child,
    async ask(message) {
      const reply = once(child, 'message');
      child.send(message);
      return (await reply)[0];
    },
  };
}

if (process.env.RL_LB_WORKER === '1' && typeof process.send === 'function') {
  const { RL_URL, RL_LIMIT, RL_K, RL_HOLD, RL_PREFIX } = process.env;
  const client = createClient({ url: RL_URL, RESP: 3, disableOfflineQueue: true });
  client.on('error', () => {});
  await client.connect();
  const limiter = new RateLimit({
    client,
    limit: JSON.parse(RL_LIMIT),
    prefix: RL_PREFIX,
    localBudget: Number(RL_K),
    hold: RL_HOLD || undefined,
    timeout: 60_000, // a busy machine is not a failure: none is counted here
    logger: null,
  });
  const counts = { admitted: 0, denied: 0, failed: 0 };
  process.on('message', async (m) => {
    if (m.op === 'run') {
      for (let done = 0; done < m.n; done += m.concurrency) {
        const ds = await Promise.all(
          Array.from({ length: Math.min(m.concurrency, m.n - done) }, () => limiter.check(m.key, m.cost ?? 1)),
        );
        for (const d of ds) {
          if (d.failed) counts.failed += 1;
          else if (d.allowed) counts.admitted += m.cost ?? 1;
          else counts.denied += 1;
        }
      }
      process.send({ op: 'ran', ...counts, stats: { ...limiter.stats } });
    } else if (m.op === 'close') {
      const refunded = await limiter.close();
      await new Promise((r) => process.send({ op: 'closed', refunded, ...counts, stats: { ...limiter.stats } }, r));
      await client.quit();
      process.disconnect();
    }
  });
  process.send({ op: 'ready' });
}
