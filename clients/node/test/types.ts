// Compiled with tsc --noEmit by types.test.js: the declarations fit the way the README uses them.
import express from 'express';
import { createClient, createCluster } from 'redis';
import {
  Counter,
  ModuleRequiredError,
  RateLimit,
  RateLimiterRedis,
  RateLimiterRes,
  RedisModuleStore,
  rateLimitHeaders,
  rateLimitMiddleware,
  reconnectStrategy,
  loadSheddingBody,
  type AdaptiveKind,
  type Count,
  type Decision,
  type PolicyRule,
  type XRateLimitReset,
} from 'ratelimit-redis-module';
import { RateLimiterRedis as FlexibleRedis, type RateLimiterRedisOptions } from 'ratelimit-redis-module/flexible';
import { rateLimit, type Store } from 'express-rate-limit';
import { RedisModuleStore as ErlStore, type ClientRateLimitInfo } from 'ratelimit-redis-module/express-rate-limit';

const client = createClient({ RESP: 3, disableOfflineQueue: true, socket: { reconnectStrategy } });
const app = express();
const limit = rateLimitMiddleware({
  client,
  limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' },
  key: (req) => String(req.headers['x-client-id'] ?? req.ip),
  failMode: 'closed',
  timeout: 50,
  skip: (req, res) => req.url === '/health' || res.headersSent,
});
app.use(limit);
const failures: number = limit.limiter.stats.failures;
const managed = new RateLimit({ client, limit: { algorithm: 'slidinglog', limit: 10, window: '1m' }, backend: 'script', setupTimeout: 2000 });
const backend: 'module' | 'script' | undefined = managed.stats.backend;
const setupFailures: number = managed.stats.setupFailures;
const moduleMissing = (e: unknown): boolean => e instanceof ModuleRequiredError;

const policy = new RateLimit({ client, limit: { policy: 'api' }, denialMemory: 0 });
async function check(): Promise<Array<[string, string]>> {
  const d = await policy.check('user:1', 2);
  if (d.failed) return [];
  const decision: Decision = d;
  const partial = await policy.check('user:1', 1, { atMost: 10, shadow: true });
  if (!partial.failed && partial.shadowDenied) return [['granted', String(partial.granted ?? 0)]];
  const given: number = await policy.refund('user:1', 2, { dryRun: true });
  if (given > 0) await policy.check('user:1', 1, { dryRun: true });
  return rateLimitHeaders(decision, { xRateLimitReset: 'epoch' });
}

const limiter = new RateLimiterRedis({ storeClient: client, points: 5, duration: 1, blockDuration: 60 });
async function login(): Promise<number> {
  try {
    const res: RateLimiterRes = await limiter.consume('ip', 1);
    return res.remainingPoints;
  } catch (rej) {
    if (rej instanceof Error) throw rej;
    return -(rej as RateLimiterRes).msBeforeNext;
  }
}
const maybe: Promise<RateLimiterRes | null> = limiter.get('ip');
const written: Promise<RateLimiterRes> = limiter.set('ip', 3, 60);
new RateLimiterRedis({ storeClient: client, points: 5, duration: 1, blockDuration: 60, blockOnConsumed: 8 });
// RL.COUNTER: a plain counter.
const counter = new Counter({ client, prefix: 'rl:hits:', backend: 'script', timeout: 100 });
const counted: Promise<Count> = counter.count('42', '1m', { by: -2, xx: true });
// @ts-expect-error: by is a number of units
counter.count('42', '1m', { by: '2' });
export { written, counted };
// The in-memory blocks' clock, injectable as the middleware's is.
const fake = { ms: 0 };
new RateLimiterRedis({ storeClient: client, points: 5, inMemoryBlockOnConsumed: 6, now: () => fake.ms, setupTimeout: 2000 });
rateLimitMiddleware({ client, limit: { policy: 'api' }, now: () => fake.ms, shadow: (req) => req.headers['x-shadow'] === '1' });
rateLimitMiddleware({ client, limit: { algorithm: 'warmup', rate: 10, period: '1s', warmup: '10s', coldFactor: 3 } });
rateLimitMiddleware({ client, limit: { policy: 'api', block: '1m' } });
// A policy whose rules are in the configuration: on the scripts and on the module alike.
const rules: PolicyRule[] = [
  { algorithm: 'gcra', burst: 10, rate: 10, period: '1s' },
  { algorithm: 'fixedwindow', limit: 300, window: '1m' },
  { algorithm: 'fixedwindow', limit: 3, window: '1m', shadow: true },
];
new RateLimit({ client, limit: { policy: 'api', rules, block: '10s' }, backend: 'script', localBudget: 5 });
rateLimitMiddleware({ client, limit: { policy: 'api', rules: [{ algorithm: 'warmup', rate: 10, period: '1s', warmup: '10s', coldFactor: 3 }] } });
// @ts-expect-error: a policy's rule is not a concurrency limit
rateLimitMiddleware({ client, limit: { policy: 'api', rules: [{ algorithm: 'concurrency', limit: 2, lease: '30s' }] } });
// @ts-expect-error: a penalty is the policy's, not a rule's
rateLimitMiddleware({ client, limit: { policy: 'api', rules: [{ algorithm: 'gcra', burst: 1, rate: 1, period: '1s', block: '1m' }] } });
// @ts-expect-error: only a policy has rules
rateLimitMiddleware({ client, limit: { algorithm: 'gcra', burst: 1, rate: 1, period: '1s', rules } });
rateLimitMiddleware({ client, limit: { policy: 'api' }, skip: async (req) => req.headers['x-internal'] === '1' });
// X-RateLimit-Reset in epoch seconds, as express-rate-limit's legacy field.
const resetForm: XRateLimitReset = 'epoch';
rateLimitMiddleware({ client, limit: { policy: 'api' }, xRateLimitReset: resetForm });
// @ts-expect-error: X-RateLimit-Reset is 'delta' or 'epoch'
rateLimitMiddleware({ client, limit: { policy: 'api' }, xRateLimitReset: 'seconds' });
const leases = new RateLimit({ client, limit: { algorithm: 'concurrency', limit: 2, lease: '30s' } });
leases.check('jobs', 1, { id: 'worker-7' }).then((d) => (d.failed ? undefined : leases.release('jobs', d)));
// An adaptive concurrency limit, as the README's example; a release reporting the work's latency.
const shedding = rateLimitMiddleware({
  client,
  limit: { algorithm: 'concurrency', limit: 20, lease: '30s', adaptive: 'gradient2', min: 4, max: 200 },
});
const kind: AdaptiveKind | undefined = shedding.limiter.adaptive;
leases.check('jobs').then((d) => (d.failed ? undefined : leases.release('jobs', d, { rtt: 12.5, dropped: d.adaptive === kind })));
const body: string = loadSheddingBody('default');
// @ts-expect-error: min and max bound an adaptive limit only
rateLimitMiddleware({ client, limit: { algorithm: 'concurrency', limit: 2, lease: '30s', min: 1 } });
// @ts-expect-error: no such adaptive kind
rateLimitMiddleware({ client, limit: { algorithm: 'concurrency', limit: 2, lease: '30s', adaptive: 'bbr' } });
// @ts-expect-error: a concurrency limit has no block
rateLimitMiddleware({ client, limit: { algorithm: 'concurrency', limit: 2, lease: '30s', block: '1m' } });
// @ts-expect-error: the window's parameters are numbers or durations, not booleans
rateLimitMiddleware({ client, limit: { algorithm: 'gcra', burst: true, rate: 1, period: 1 } });

// A local budget: 64 units at a time, given back after 2 s and at shutdown.
const budgeted = rateLimitMiddleware({
  client,
  limit: { algorithm: 'gcra', burst: 100, rate: 100, period: '1s' },
  localBudget: 64,
  hold: '2s',
});
const held: number = budgeted.limiter.stats.held + budgeted.limiter.stats.localAdmitted;
const holdMs: number | undefined = budgeted.limiter.localBudget?.holdMs;
process.once('SIGTERM', () => {
  budgeted.limiter.close().then((given: number) => given, () => 0);
});
new RateLimit({ client, limit: { policy: 'api' }, localBudget: 8, hold: 500 }).flush().then((n: number) => n);

export { check, login, maybe, failures, body, held, holdMs, backend, moduleMissing };

// A cluster client (createCluster): RateLimit, the middleware and RateLimiterRedis take it.
const cluster = createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }], defaults: { disableOfflineQueue: true } });
const onCluster = new RateLimit({ client: cluster, limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' }, durable: 1 });
const clusterBackend: 'module' | 'script' | undefined = onCluster.stats.backend;
rateLimitMiddleware({ client: cluster, limit: { policy: 'api', rules: [{ algorithm: 'fixedwindow', limit: 10, window: '1m' }] } });
new RateLimiterRedis({ storeClient: cluster, points: 5, duration: 1 });

// The rate-limiter-flexible drop-in on its own subpath: the same class as the main entry's.
const flexibleOptions: RateLimiterRedisOptions = { storeClient: client, points: 5, duration: 1 };
const fromSubpath: RateLimiterRedis = new FlexibleRedis(flexibleOptions);
void fromSubpath.consume('k');

// A store for express-rate-limit, checked against express-rate-limit's own `Store` and `Options`
// types (the pinned devDependency's): on its subpath and from the main entry, the same class.
const erlStore: Store = new RedisModuleStore({ client, prefix: 'rl:api:', timeout: 100, backend: 'auto' });
app.use(rateLimit({ windowMs: 15 * 60_000, limit: (req) => (req.get('X-Plan') === 'pro' ? 1000 : 100), store: erlStore }));
app.use(rateLimit({
  windowMs: 60_000,
  limit: 10,
  store: new ErlStore({ client: cluster, limit: { algorithm: 'slidingwindow', limit: 10, window: '1m' } }),
}));
const erlInfo: Promise<ClientRateLimitInfo | undefined> = new ErlStore({ client }).get('k');
const erlStats: number = new ErlStore({ client }).stats.calls;
// @ts-expect-error: a concurrency limit is not a store's
new ErlStore({ client, limit: { algorithm: 'concurrency', limit: 2, lease: '30s' } });
// @ts-expect-error: windowMs is express-rate-limit's option, not the store's
new ErlStore({ client, windowMs: 1000 });
export { erlInfo, erlStats };
// ioredis's clients, where node-redis's are taken (ioredis's own types, structurally).
import { Redis as IORedis, Cluster as IOCluster } from 'ioredis';
const io = new IORedis({ lazyConnect: true });
const ioSentinel = new IORedis({ sentinels: [{ host: '127.0.0.1', port: 26379 }], name: 'main', lazyConnect: true });
const ioCluster = new IOCluster([{ host: '127.0.0.1', port: 7000 }], { lazyConnect: true });
const ioLimits: RateLimit[] = [io, ioSentinel, ioCluster].map(
  (c) => new RateLimit({ client: c, limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' } }),
);
const ioFlexible: RateLimiterRedis[] = [io, ioCluster].map((storeClient) => new RateLimiterRedis({ storeClient, points: 5, duration: 1 }));
void ioLimits;
void ioFlexible;
const ioStores: RedisModuleStore[] = [io, ioSentinel, ioCluster].map((c) => new RedisModuleStore({ client: c }));
void ioStores;
