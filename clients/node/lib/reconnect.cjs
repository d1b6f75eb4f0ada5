// A node-redis reconnect strategy for a limiter on the request path: while Redis is away every
// request fails open or closed, so the client should be back as soon as Redis is.

// @ts-check
'use strict';

/** The longest wait between two connection attempts, in milliseconds. */
const RECONNECT_MAX_MS = 100;

/**
 * node-redis's `socket.reconnectStrategy` (`createClient({ socket: { reconnectStrategy } })`):
 * the next attempt 50 to 100 ms after the last one failed, however long Redis has been away,
 * and after any failure (node-redis's own gives up on a socket timeout). node-redis's default
 * waits twice as long after each failed attempt, up to 2 s and 200 ms of jitter, so once Redis
 * is back a limiter would go on failing for up to 2.2 s. An attempt against a stopped server is
 * one refused connection: ten to twenty a second cost nothing. The jitter keeps many processes
 * that lost the same server from all knocking at once when it comes back. Its arguments
 * (the attempt's number, the failure) are node-redis's, and make no difference.
 * @returns {number}
 */
function reconnectStrategy() {
  return RECONNECT_MAX_MS / 2 + Math.floor(Math.random() * (RECONNECT_MAX_MS / 2 + 1));
}

module.exports = { RECONNECT_MAX_MS, reconnectStrategy };
