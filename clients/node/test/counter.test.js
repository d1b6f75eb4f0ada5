// Counter (RL.COUNTER) on both backends: the module on a server with it, counter.lua on a plain
// redis-server, the same calls giving the same exact counts; the key a plain integer string
// (GET reads it) whose TTL is the window from the first hit, on the server's clock (asserted
// between bounds of the real time measured since the call that set it); BY 0 reads, XX on no
// key writes nothing, a key without a TTL gets the window; errors named, nothing written; and
// what the constructor and a call refuse. (clients/python/tests/test_counter.py holds the script
// to the module call for call.)

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Counter, parseCount } from '../index.js';
import { PATIENT, moduleAndPlainForFile, quiet, ttlWithin as within } from './helpers.js';

const { m, p } = await moduleAndPlainForFile();

const BACKENDS = [['module', () => m], ['script', () => p]];

for (const [backend, clientOf] of BACKENDS) {
  test(`${backend}: counts as INCRBY and PEXPIRE, the key GET reads`, async () => {
    const client = clientOf();
    await client.del(['rl:n:c', 'rl:n:none', 'rl:n:p']);
    const counter = new Counter({ client, prefix: 'rl:n:', backend, ...PATIENT, logger: quiet });
    const since = performance.now();
    assert.deepEqual(await counter.count('c', '10s'), { count: 1, ttlMs: 10_000 });
    const added = await counter.count('c', 10_000, { by: 4 });
    assert.equal(added.count, 5);
    within(added.ttlMs, 10_000, since);
    assert.equal(await client.get('rl:n:c'), '5');
    const read = await counter.count('c', '10s', { by: 0 });
    assert.equal(read.count, 5);
    within(read.ttlMs, 10_000, since);
    assert.equal((await counter.count('c', '10s', { by: -7, xx: true })).count, -2);
    assert.equal(await client.get('rl:n:c'), '-2');
    assert.equal(counter.backend, backend);

    assert.deepEqual(await counter.count('none', '1m', { by: 0 }), { count: 0, ttlMs: -2 });
    assert.deepEqual(await counter.count('none', '1m', { xx: true }), { count: 0, ttlMs: -2 });
    assert.equal(await client.exists('rl:n:none'), 0);

    await client.set('rl:n:p', '7');
    assert.deepEqual(await counter.count('p', '1m', { by: 0 }), { count: 7, ttlMs: -1 });
    assert.deepEqual(await counter.count('p', '1m'), { count: 8, ttlMs: 60_000 });
  });

  test(`${backend}: errors are the server's, and change nothing`, async () => {
    const client = clientOf();
    await client.set('rl:e:bad', 'x7');
    await client.hSet('rl:e:h', 'a', '1');
    const counter = new Counter({ client, prefix: 'rl:e:', backend, ...PATIENT, logger: quiet });
    await assert.rejects(counter.count('bad', '1m'), { message: 'ERR value is not an integer or out of range' });
    await assert.rejects(counter.count('h', '1m', { by: 0 }), { message: 'WRONGTYPE Operation against a key holding the wrong kind of value' });
    assert.equal(await client.get('rl:e:bad'), 'x7');
    assert.equal(await client.pTTL('rl:e:bad'), -1);
    for (const by of [1e12 + 1, -1e12 - 1, 1.5, '2', true]) {
      await assert.rejects(counter.count('w', '1m', { by }), { name: 'TypeError', message: /^invalid by: expected an integer from -1000000000000 to 1000000000000/ });
    }
    await assert.rejects(counter.count('w', '0s'), { name: 'TypeError', message: /^invalid window/ });
    await assert.rejects(counter.count('w', '1m', { xx: 'yes' }), { name: 'TypeError', message: /^invalid xx/ });
    assert.equal(await client.exists('rl:e:w'), 0);
  });
}

test('the constructor names what it refuses', () => {
  assert.throws(() => new Counter({ client: {} }), { name: 'TypeError', message: /^invalid client/ });
  assert.throws(() => new Counter({ client: m, window: '1m' }), { name: 'TypeError', message: /^invalid option window: Counter takes client, prefix, backend/ });
  assert.throws(() => new Counter({ client: m, backend: 'lua' }), { name: 'TypeError' });
  assert.throws(() => new Counter({ client: m, timeout: 0 }), { name: 'TypeError', message: /^invalid timeout/ });
});

test('the reply is read strictly', () => {
  assert.deepEqual(parseCount([3, 1000]), { count: 3, ttlMs: 1000 });
  assert.deepEqual(parseCount(['3', '-2']), { count: 3, ttlMs: -2 });
  for (const bad of [[3], [3, 1, 2], { count: 3 }, [3, -3], ['x', 1], null, [2 ** 53, 1]]) {
    assert.throws(() => parseCount(bad), { message: /^unexpected reply from the module: RL.COUNTER answered/ });
  }
});
