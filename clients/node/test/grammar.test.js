// The package's copy of the module's grammar held to the module: every duration and count of
// clients/lua/conformance/grammar.json (written by src/commands/error_vectors.rs from the module's
// own parser) reads here as the module reads it, and the bounds are the module's. No server: the
// package checks these before it sends anything.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { MAX_COUNT, MAX_DURATION_MS, count, durationMs } from '../lib/limits.cjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const grammar = JSON.parse(readFileSync(path.join(here, '../../lua/conformance/grammar.json'), 'utf8'));

/** What `read(text)` makes of a text: its value, or null when it throws. */
function reads(read, text) {
  try {
    return read(text);
  } catch {
    return null;
  }
}

test('the bounds are the module\'s', () => {
  assert.equal(MAX_COUNT, grammar.max_count);
  assert.equal(MAX_DURATION_MS, grammar.max_duration_ms);
});

test('every duration reads as the module reads it, as text and as milliseconds', () => {
  const differ = grammar.durations.filter(([text, ms]) => reads(durationMs, text) !== ms);
  assert.deepEqual(differ, [], 'the texts read otherwise (the module\'s ms beside each)');
  for (const [text, ms] of grammar.durations) {
    if (/^(0|[1-9][0-9]*)$/.test(text) && Number.isSafeInteger(Number(text))) {
      assert.equal(reads(durationMs, Number(text)), ms, text);
    }
  }
});

test('every count the package takes as a number is one the module takes', () => {
  for (const [text, n] of grammar.counts) {
    if (!/^(0|[1-9][0-9]*)$/.test(text) || !Number.isSafeInteger(Number(text))) continue;
    assert.equal(reads((v) => count(v, 'n'), Number(text)), n, text);
  }
});
