// The module's reply to an admission command, in either protocol, as the package's decision
// fields.

/**
 * The reply of an admission command, in either protocol: RESP2 is an array
 * [allowed, limit, remaining, retry_after_ms, reset_after_ms, ...], RESP3 a map (an object or a
 * Map, as node-redis's type mapping gives it) with `allowed` a boolean. `sixth` names the field
 * the command adds after the five (`rule` for RL.LIMIT, `delay_ms` for RL.LEAKYBUCKET).
 */
export function parseReply(reply, sixth) {
  let r;
  if (Array.isArray(reply)) {
    r = {
      allowed: reply[0],
      limit: reply[1],
      remaining: reply[2],
      retry_after_ms: reply[3],
      reset_after_ms: reply[4],
    };
    if (sixth) r[sixth] = reply[5];
  } else if (reply instanceof Map) {
    r = Object.fromEntries(reply);
  } else if (reply !== null && typeof reply === 'object') {
    r = reply;
  } else {
    throw new Error(`unexpected reply from the module: ${String(reply)}`);
  }
  const out = {
    allowed: r.allowed === true || Number(r.allowed) === 1,
    limit: Number(r.limit),
    remaining: Number(r.remaining),
    retryAfterMs: Number(r.retry_after_ms),
    resetAfterMs: Number(r.reset_after_ms),
  };
  if (sixth === 'rule' && r.rule !== undefined) out.rule = Number(r.rule);
  if (sixth === 'delay_ms' && r.delay_ms !== undefined) out.delayMs = Number(r.delay_ms);
  if (sixth === 'token' && r.token != null) out.token = String(r.token);
  for (const k of ['limit', 'remaining', 'retryAfterMs', 'resetAfterMs']) {
    if (!Number.isFinite(out[k])) throw new Error(`unexpected reply from the module: no ${k}`);
  }
  return out;
}
