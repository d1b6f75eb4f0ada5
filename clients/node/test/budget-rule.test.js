// The local budgets' rule held to the algorithms crate: for every case of
// clients/lua/conformance/budget.json (written by algorithms/src/budget_promise.rs from the rule
// its model checks, `falls_due`), the package's `fallsDue` says when a refill's units fall due
// and whether they lapse or are given back, as the crate does. Each kind is found by its command
// in the package's own table; times are in ms with fractions, as the budgets read the clock
// (compared to the crate's µs rounded to the µs). No server.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ALGORITHMS } from '../lib/limits.cjs';
import { fallsDue, lapsesAtWindowEnd } from '../lib/local-budget.cjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const budget = JSON.parse(readFileSync(path.join(here, '../../lua/conformance/budget.json'), 'utf8'));

/** The algorithm of a kind of budget.json (its command; `INTERVAL`, a flag), undefined for a policy. */
function algorithmOf(kind) {
  const [command, flag] = kind.split(' ');
  if (command === 'RL.LIMIT') return undefined;
  const found = Object.entries(ALGORITHMS).filter(([, a]) => a.command === command);
  assert.equal(found.length, 1, kind);
  if (flag !== undefined) assert.equal(found[0][1].flag?.toUpperCase(), flag, kind);
  return found[0][0];
}

test('every case falls due as the crate says', () => {
  const differ = [];
  for (const c of budget.cases) {
    const windowed = lapsesAtWindowEnd(algorithmOf(c.kind));
    const { due, refund } = fallsDue(windowed, c.sent_us / 1000, c.hold_ms, c.reset_after_ms);
    const got = [Math.round(due * 1000), !refund];
    if (got[0] !== c.due_us || got[1] !== c.lapses) differ.push({ ...c, got });
  }
  const of = `${differ.length} of ${budget.cases.length} cases`;
  assert.deepEqual(differ, [], `${of}: the crate's, with the package's [due_us, lapses]`);
});

test('the file covers every kind and the edges', () => {
  const kinds = new Set(budget.cases.map((c) => c.kind));
  const budgeted = [...Object.keys(ALGORITHMS).filter((a) => a !== 'concurrency'), undefined];
  assert.deepEqual(new Set([...kinds].map(algorithmOf)), new Set(budgeted));
  assert.ok(kinds.has('RL.TOKENBUCKET INTERVAL'));
  const fixed = budget.cases.filter((c) => c.kind === 'RL.FIXEDWINDOW');
  for (const edge of [-1, 0, 1]) {
    assert.ok(fixed.some((c) => Math.sign(c.reset_after_ms - c.hold_ms) === edge), `end vs hold: ${edge}`);
  }
  assert.ok(budget.cases.some((c) => c.hold_ms % 2 === 1 && !c.lapses));
});
