// What the tests of RedisModuleStore share: an Express app behind express-rate-limit itself
// (the pinned devDependency) served on node:http, requests to it with the time around each,
// the fields express-rate-limit writes, and its store's decrements made observable.

import assert from 'node:assert/strict';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { get, secondsLeft, serve } from './helpers.js';

/** express-rate-limit's logger, kept: its errors and warnings (validations) in `lines`. */
export function erlLogger() {
  const lines = [];
  return { lines, error: (e, m) => lines.push(['error', m, e]), warn: (e, m) => lines.push(['warn', m, e]) };
}

/**
 * An Express app behind rateLimit(options), served: GET / answers "hello", GET /fail 400,
 * GET /info the request's rate-limit info (requestPropertyName, default rateLimit) as JSON.
 * `as(id, path)` sends a GET as the caller `id` (X-Client-Id, the keyGenerator's unless told).
 */
export async function app(options) {
  const logger = erlLogger();
  const limiter = rateLimit({ keyGenerator: (req) => String(req.get('X-Client-Id')), logger, ...options });
  const a = express();
  a.use(limiter);
  a.get('/', (req, res) => res.send('hello'));
  a.get('/fail', (req, res) => res.status(400).send('bad'));
  a.get('/info', (req, res) => res.json(Reflect.get(req, options.requestPropertyName ?? 'rateLimit')));
  // An error (a store's, when passOnStoreError is false) answered 500 with its message.
  a.use((error, req, res, next) => res.status(500).send(String(error?.message)));
  const server = await serve(a);
  return {
    limiter,
    logger,
    close: server.close,
    as: (id, path = '/', headers = {}) => timed(() => get(server.url, path, { 'X-Client-Id': id, ...headers })),
  };
}

/** A response with `before` and `after`, Date.now() around it (for epoch-second fields). */
export async function timed(send) {
  const before = Date.now();
  const r = await send();
  return { ...r, before, after: Date.now() };
}

/** The headers express-rate-limit writes, in a fixed order, undefined when absent. */
export function fields(r, names) {
  return Object.fromEntries(names.map((n) => [n, r.headers[n]]));
}

export const LEGACY = ['x-ratelimit-limit', 'x-ratelimit-remaining'];
export const DRAFT6 = ['ratelimit-policy', 'ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset'];
export const DRAFT7 = ['ratelimit-policy', 'ratelimit'];

/**
 * X-RateLimit-Reset (epoch seconds of the window's end) for a window ending `ms` after the request,
 * or after `from` (Date.now() before the request that began the window, which may be earlier).
 */
export function assertEpochReset(r, ms, from = r.before) {
  const reset = Number(r.headers['x-ratelimit-reset']);
  assert.ok(reset >= Math.ceil((from + ms) / 1000) - 1 && reset <= Math.ceil((r.after + ms) / 1000),
    `X-RateLimit-Reset ${reset} is not ${ms} ms after the request (${from}..${r.after})`);
}

/**
 * `r` with the seconds left its fields say (RateLimit-Reset, Retry-After, draft-7's reset= and
 * draft-8's t=) checked against a window of `windowMs` begun after `since` (performance.now()
 * before the request that began it: helpers' secondsLeft, the window being the key's TTL on the
 * server's clock) and then written as the window's whole seconds, so that the rest compares
 * exactly; a value out of those bounds is left as it is, for the comparison to show.
 */
export function inWindow(r, windowMs, since) {
  const ok = secondsLeft(windowMs, since);
  const whole = String(Math.ceil(windowMs / 1000));
  const fix = (v) => (ok.includes(v) ? whole : v);
  const headers = { ...r.headers };
  for (const name of ['ratelimit-reset', 'retry-after']) if (headers[name] !== undefined) headers[name] = fix(headers[name]);
  if (typeof headers.ratelimit === 'string') {
    headers.ratelimit = headers.ratelimit.replace(/\b(reset=|t=)(\d+)/, (_, k, v) => `${k}${fix(v)}`);
  }
  return { ...r, headers };
}

/**
 * `store.decrement` made observable: `done(n)` resolves once n decrements have ended (the event
 * express-rate-limit fires after a response finishes), `keys` lists them.
 */
export function watchDecrements(s) {
  const keys = [];
  let waiting = [];
  const original = s.decrement.bind(s);
  s.decrement = async (key) => {
    try {
      await original(key);
    } finally {
      keys.push(key);
      for (const w of waiting) w();
      waiting = [];
    }
  };
  return {
    keys,
    async done(n) {
      while (keys.length < n) await new Promise((r) => waiting.push(r));
    },
  };
}
