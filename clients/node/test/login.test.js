// rate-limiter-flexible's documented login protection (its wiki's "login endpoint protection"
// example: consecutive failures per username and IP, and failures per IP per day, each with a
// blockDuration, read with get() before the password is checked), written once against its
// interface and served by Express twice: with its RateLimiterRedis, and with ours. The two
// services must answer the same story the same way.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import express from 'express';
import * as RLF from 'rate-limiter-flexible';
import { RateLimiterRedis } from '../index.js';
import { request, serve, serverForFile } from './helpers.js';

const MAX_BY_IP_PER_DAY = 100;
const MAX_CONSECUTIVE_BY_USER_AND_IP = 3;
const USERS = { alice: 'correct horse' };

/** The example's route, for a RateLimiterRedis class and its extra options. */
function loginApp(Limiter, client, extra, tag) {
  const slowBruteByIP = new Limiter({
    storeClient: client, keyPrefix: `${tag}_login_fail_ip_per_day`,
    points: MAX_BY_IP_PER_DAY, duration: 60 * 60 * 24, blockDuration: 60 * 60 * 24, ...extra,
  });
  const consecutiveFails = new Limiter({
    storeClient: client, keyPrefix: `${tag}_login_fail_consecutive_username_and_ip`,
    points: MAX_CONSECUTIVE_BY_USER_AND_IP, duration: 60 * 60 * 24 * 90, blockDuration: 60 * 60, ...extra,
  });
  const app = express();
  app.use(express.json());
  app.post('/login', async (req, res) => {
    const ip = req.ip;
    const key = `${req.body.user}_${ip}`;
    const [byUser, byIp] = await Promise.all([consecutiveFails.get(key), slowBruteByIP.get(ip)]);
    let retrySecs = 0;
    if (byIp !== null && byIp.consumedPoints > MAX_BY_IP_PER_DAY) {
      retrySecs = Math.round(byIp.msBeforeNext / 1000) || 1;
    } else if (byUser !== null && byUser.consumedPoints > MAX_CONSECUTIVE_BY_USER_AND_IP) {
      retrySecs = Math.round(byUser.msBeforeNext / 1000) || 1;
    }
    if (retrySecs > 0) {
      res.set('Retry-After', String(retrySecs)).status(429).send('Too Many Requests');
      return;
    }
    const exists = req.body.user in USERS;
    if (USERS[req.body.user] !== req.body.password) {
      try {
        const consumes = [slowBruteByIP.consume(ip)];
        if (exists) consumes.push(consecutiveFails.consume(key));
        await Promise.all(consumes);
        res.status(400).send('email or password is wrong');
      } catch (rejected) {
        if (rejected instanceof Error) throw rejected;
        res.set('Retry-After', String(Math.round(rejected.msBeforeNext / 1000) || 1)).status(429).send('Too Many Requests');
      }
      return;
    }
    if (byUser !== null && byUser.consumedPoints > 0) await consecutiveFails.delete(key);
    res.send('authorized');
  });
  return app;
}

/** POST /login with a JSON body; resolves [status, Retry-After, body]. */
async function post(base, body) {
  const data = JSON.stringify(body);
  const res = await request(base, 'POST', '/login',
    { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) }, data);
  return [res.status, res.headers['retry-after'], res.body];
}

const { client } = await serverForFile();

test("rate-limiter-flexible's login protection answers the same on both classes", async () => {
  const story = [
    // A good password first: nothing to reset.
    [{ user: 'alice', password: 'correct horse' }, [200, undefined, 'authorized']],
    // Three wrong ones are answered 400; the fourth goes over and blocks for an hour.
    [{ user: 'alice', password: 'x' }, [400, undefined, 'email or password is wrong']],
    [{ user: 'alice', password: 'x' }, [400, undefined, 'email or password is wrong']],
    [{ user: 'alice', password: 'x' }, [400, undefined, 'email or password is wrong']],
    [{ user: 'alice', password: 'x' }, [429, '3600', 'Too Many Requests']],
    // Blocked: get() says more than the points, so even the right password waits.
    [{ user: 'alice', password: 'correct horse' }, [429, '3600', 'Too Many Requests']],
    // An unknown user counts only against the IP.
    [{ user: 'mallory', password: 'x' }, [400, undefined, 'email or password is wrong']],
  ];
  const answers = {};
  for (const [name, Limiter, extra] of [
    ['rate-limiter-flexible', RLF.RateLimiterRedis, { useRedisPackage: true }],
    ['ratelimit-redis-module', RateLimiterRedis, {}],
  ]) {
    const server = await serve(loginApp(Limiter, client, extra, name.replace(/-/g, '_')));
    try {
      answers[name] = [];
      for (const [body] of story) answers[name].push(await post(server.url, body));
    } finally {
      await server.close();
    }
  }
  assert.deepEqual(answers['ratelimit-redis-module'], story.map(([, expected]) => expected));
  assert.deepEqual(answers['ratelimit-redis-module'], answers['rate-limiter-flexible']);
});
