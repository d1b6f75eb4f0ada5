// The tests' own harness (helpers.js): a server that cannot have its port must fail to start,
// not hang. Two clusters started at once can pick a port that is the other's cluster bus port
// (a node's port + 10000): the bus accepts the readiness probe's connection and never answers
// its PING, so a probe that waited for an answer alone hung `make test` (Valkey 9.1, the Node
// suite's cluster-client.test.js, 2026-11-29).

import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { freePort, startRedis } from './helpers.js';

test('a server whose port a silent listener holds fails to start, without hanging', { timeout: 60_000 }, async () => {
  const port = await freePort();
  const silent = net.createServer((socket) => { socket.on('data', () => {}); });
  await new Promise((resolve) => silent.listen(port, '127.0.0.1', resolve));
  try {
    await assert.rejects(startRedis({ port, withModule: false }), /did not start: [^]*Address already in use/);
  } finally {
    silent.close();
  }
});
