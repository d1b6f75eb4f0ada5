// Compiled with tsc --noEmit by types.test.js: the types a CommonJS program gets through the
// exports' "require" condition (index.d.cts, flexible.d.cts), as the README's require example
// uses them.
import { createClient } from 'redis';
import rl = require('ratelimit-redis-module');
import flexible = require('ratelimit-redis-module/flexible');
import erl = require('ratelimit-redis-module/express-rate-limit');
import expressRateLimit = require('express-rate-limit');

const client = createClient();
const limit = new rl.RateLimit({ client, limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' } });
async function checked(): Promise<boolean> {
  const d = await limit.check('user:1', 1, { atMost: 5 });
  return d.allowed && !d.failed && d.granted === 5;
}
const limiter: rl.RateLimiterRedis = new flexible.RateLimiterRedis({ storeClient: client, points: 5, duration: 1 });
const res: Promise<flexible.RateLimiterRes> = limiter.consume('user:1');
const options: flexible.RateLimiterRedisOptions = { storeClient: client, keyPrefix: 'login' };
// @ts-expect-error: not an option of RateLimit (a misspelt failMode)
new rl.RateLimit({ client, limit: { algorithm: 'gcra', burst: 5, rate: 10, period: '1m' }, failmode: 'closed' });
const store: expressRateLimit.Store = new erl.RedisModuleStore({ client, limit: { algorithm: 'gcra', burst: 5, rate: 5, period: '1m' } });
const same: rl.RedisModuleStore = store as erl.RedisModuleStore;
export { checked, res, options, same };
