// The declarations, checked by the pinned TypeScript: the typed programs that use them compile
// (tsc --noEmit), each through its own condition of `exports`; and the JavaScript is held to
// them (tsc -p . on the sources: tsconfig.json, checkJs; index.cjs and flexible.cjs say what
// binds them to index.d.cts and flexible.d.cts), so that declarations and code cannot part.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { PACKAGE_TEST } from './helpers.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const tsc = (...args) =>
  spawnSync(process.execPath, [path.join(here, '../node_modules/typescript/bin/tsc'), ...args], { encoding: 'utf8', maxBuffer: 1 << 30 });

test('the declarations type-check typed programs, import and require each through its own types', { skip: PACKAGE_TEST }, () => {
  const r = tsc('--noEmit', '--traceResolution', '-p', path.join(here, 'tsconfig.json'));
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout.split('\n').filter((l) => /error TS/.test(l)).join('\n')}${r.stderr}`);
  // types.ts (an ES module) gets the "import" types, types-require.cts the "require" ones.
  const resolved = [...r.stdout.matchAll(/Module name '(ratelimit-redis-module[^']*)' was successfully resolved to '[^']*\/([^/']+)'/g)]
    .map(([, name, file]) => `${name} ${file}`);
  assert.deepEqual([...new Set(resolved)].sort(), [
    'ratelimit-redis-module index.d.cts',
    'ratelimit-redis-module index.d.ts',
    'ratelimit-redis-module/express-rate-limit express-rate-limit.d.cts',
    'ratelimit-redis-module/express-rate-limit express-rate-limit.d.ts',
    'ratelimit-redis-module/flexible flexible.d.cts',
    'ratelimit-redis-module/flexible flexible.d.ts',
  ]);
});

test('the JavaScript fits its declarations (tsc -p . on the sources)', { skip: PACKAGE_TEST }, () => {
  const r = tsc('-p', path.join(here, '..'));
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
});
