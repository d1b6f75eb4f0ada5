// rateLimitMiddleware: Express/Connect middleware (plain node:http works too) that checks one
// limit per request and turns the decision into the HTTP fields, a 429 or a 503.

import { UNAVAILABLE_BODY, quotaExceededBody, rateLimitHeaders } from './fields.js';
import { RateLimit } from './rate-limit.js';

function send(res, status, body) {
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/problem+json');
  res.setHeader('Content-Length', Buffer.byteLength(body));
  res.end(body);
}

/**
 * Express/Connect middleware (also a plain node:http handler's first step): checks one limit
 * per request, sets the fields, answers 429 when refused and 503 when Redis fails closed.
 * Options: those of RateLimit, plus `key(req)` (default: the remote address),
 * `cost(req)` (default 1) and `shadow` (true, or `shadow(req)`: the limit is checked, counted
 * and answered in the fields, but never refuses). The returned function has the RateLimit as
 * `.limiter`.
 */
export function rateLimitMiddleware(options = {}) {
  const limiter = options.limiter ?? new RateLimit(options);
  const keyOf = options.key ?? ((req) => req.ip ?? req.socket?.remoteAddress ?? 'unknown');
  const costOf = options.cost ?? (() => 1);
  const shadowOf = (req) => Boolean(typeof options.shadow === 'function' ? options.shadow(req) : options.shadow);
  const middleware = (req, res, next) => {
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
        for (const [name, value] of rateLimitHeaders(d)) res.setHeader(name, value);
        // A concurrency lease is held while the response is in flight: 'close' comes once it
        // is sent or the connection is gone.
        if (d.allowed && d.token !== undefined) res.once('close', () => limiter.release(key, d));
        if (d.allowed) next();
        else send(res, 429, quotaExceededBody(d.name));
      },
      (error) => next(error),
    );
  };
  middleware.limiter = limiter;
  return middleware;
}
