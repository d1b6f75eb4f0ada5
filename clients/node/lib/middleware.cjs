// rateLimitMiddleware: Express/Connect middleware (plain node:http works too) that checks one
// limit per request and turns the decision into the HTTP fields, a 429 or a 503; a concurrency
// lease held while the response is in flight, and for an adaptive limit, the request's latency
// and whether it dropped reported when it is given back.

// @ts-check
'use strict';

/** @typedef {import('../index.cjs').MiddlewareOptions} MiddlewareOptions */
/** @typedef {import('../index.cjs').RateLimitOptions} RateLimitOptions */

const {
  UNAVAILABLE_BODY,
  checkXRateLimitReset,
  loadSheddingBody,
  quotaExceededBody,
  rateLimitHeaders,
} = require('./fields.cjs');
const { RateLimit } = require('./rate-limit.cjs');

function send(res, status, body) {
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/problem+json');
  res.setHeader('Content-Length', Buffer.byteLength(body));
  res.end(body);
}

/**
 * Holds an admitted concurrency decision's lease while the response is in flight, then gives it
 * back; calls `next`. A static limit's is given back once the response closes (sent, or the
 * connection gone). An adaptive limit's is given back with the request's latency, measured from
 * just before `next()` to the response's 'finish' (the whole response handed to the OS), and
 * DROPPED when the work failed from overload: a 5xx (Express answers an error, `next(err)` or
 * a rejected async handler, with 500 unless the error says another status), the socket timing
 * out while the response was in flight, or the response closing before it finished (the
 * request aborted, the connection lost or destroyed by a server timeout).
 */
function holdLease(limiter, key, d, req, res, next) {
  // Closed while the limit was asked ('close' has come and gone): cancelled before it began.
  if (res.closed || res.destroyed) {
    limiter.release(key, d, limiter.adaptive === undefined ? {} : { dropped: true });
    next();
    return;
  }
  if (limiter.adaptive === undefined) {
    res.once('close', () => limiter.release(key, d));
    next();
    return;
  }
  const socket = req.socket;
  let timedOut = false;
  let released = false;
  const onTimeout = () => {
    timedOut = true;
  };
  let started;
  const end = (dropped) => {
    if (released) return;
    released = true;
    const rtt = Number(process.hrtime.bigint() - started) / 1e6;
    socket?.removeListener?.('timeout', onTimeout);
    limiter.release(key, d, { rtt, dropped });
  };
  res.once('finish', () => end(res.statusCode >= 500 || timedOut));
  res.once('close', () => end(true));
  socket?.on?.('timeout', onTimeout);
  started = process.hrtime.bigint();
  next();
}

/**
 * Express/Connect middleware (also a plain node:http handler's first step): checks one limit
 * per request, sets the fields, answers 429 when refused (503 when an adaptive concurrency
 * limit refuses: load shedding) and 503 when Redis fails closed.
 * Options: those of RateLimit, plus `key(req)` (default: the remote address),
 * `cost(req)` (default 1), `shadow` (true, or `shadow(req)`: the limit is checked, counted
 * and answered in the fields, but never refuses) and `skip(req, res)` (true, or a promise of
 * true: the request passes unlimited, with no round trip and no fields; health checks, internal
 * callers) and `xRateLimitReset` ('delta', the default: X-RateLimit-Reset in seconds from now;
 * 'epoch': the reset instant in seconds since the Unix epoch, as express-rate-limit's legacy
 * field). The returned function has the RateLimit as `.limiter`.
 * @param {MiddlewareOptions} options
 * @returns {import('../index.cjs').Middleware}
 */
function rateLimitMiddleware(options = {}) {
  // Checked before a RateLimit is made (its setup starts at once).
  const fields = { xRateLimitReset: checkXRateLimitReset(options.xRateLimitReset) };
  // Without `limiter`, the options are RateLimit's, which checks `client` and `limit` itself.
  const limiter = options.limiter ?? new RateLimit(/** @type {RateLimitOptions} */ (options));
  const keyOf = options.key ?? ((req) => req.ip ?? req.socket?.remoteAddress ?? 'unknown');
  const costOf = options.cost ?? (() => 1);
  const shadowOf = (req) => Boolean(typeof options.shadow === 'function' ? options.shadow(req) : options.shadow);
  const { skip } = options;
  if (skip !== undefined && typeof skip !== 'function') {
    throw new TypeError(`invalid skip: expected a function (req, res) => boolean; got ${String(skip)}`);
  }
  const limit = (req, res, next) => {
    let pending;
    let key;
    try {
      key = keyOf(req);
      pending = limiter.check(key, costOf(req), { shadow: shadowOf(req) });
    } catch (error) {
      next(error);
      return;
    }
    pending.then(
      (d) => {
        if (d.failed) {
          if (d.allowed) next();
          else send(res, 503, UNAVAILABLE_BODY);
          return;
        }
        for (const [name, value] of rateLimitHeaders(d, fields)) res.setHeader(name, value);
        // A concurrency lease is held while the response is in flight.
        if (d.allowed && d.token !== undefined) holdLease(limiter, key, d, req, res, next);
        else if (d.allowed) next();
        // An adaptive concurrency limit refuses to shed load: the service's state, not the caller's quota.
        else if (d.adaptive !== undefined) send(res, 503, loadSheddingBody(d.name));
        else send(res, 429, quotaExceededBody(d.name));
      },
      (error) => next(error),
    );
  };
  // skip's answer, a boolean or a promise of one; a skip that throws or rejects is the
  // application's error (next(error)), not a reason to limit or to pass.
  const middleware = (req, res, next) => {
    if (skip === undefined) {
      limit(req, res, next);
      return;
    }
    // A boolean, or anything with `then` (not only a Promise).
    /** @type {any} */
    let skipped;
    try {
      skipped = skip(req, res);
    } catch (error) {
      next(error);
      return;
    }
    if (typeof skipped?.then !== 'function') {
      if (skipped) next();
      else limit(req, res, next);
      return;
    }
    Promise.resolve(skipped).then(
      (yes) => (yes ? next() : limit(req, res, next)),
      (error) => next(error),
    );
  };
  middleware.limiter = limiter;
  return middleware;
}

module.exports = { rateLimitMiddleware };
