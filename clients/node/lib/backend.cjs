// The backend of a limiter whose calls are a fixed set of module commands (RedisModuleStore,
// RateLimiterRedis; RateLimit, whose scripts depend on its limit and policy, wires its own): its
// client's adapter (setup.cjs's sender), the backend it runs on ("auto" asks once per client,
// resolveBackend), the SCRIPT LOAD of its commands' scripts (loadScripts, once per client), the
// setup that does both in the background (Setup), and a command sent on the backend chosen: as
// it is on the module, as its script on the scripts (with the test clock a test sets as the
// limiter's TEST_NOW).

// @ts-check
'use strict';

const { Setup, checkSetupTimeout, loadScripts, loadScriptsFor, sender } = require('./setup.cjs');
const {
  ModuleRequiredError,
  SCRIPT_OF,
  TEST_NOW,
  checkBackend,
  evalScript,
  moduleError,
  resolveBackend,
  scriptingError,
} = require('./scripts.cjs');

/** @typedef {import('../index.cjs').Logger} Logger */

/**
 * One limiter's backend. `chosen` is 'module' or 'script' once decided (at once for backend
 * "script"), undefined before; `stats`, when given, hears the choice (`backend`) and each failed
 * setup (`setupFailures`).
 */
class Backend {
  /**
   * @param {object} owner the limiter: a test sets its `[TEST_NOW]` to the scripts' clock
   * @param {{
   *   client: any,
   *   option: unknown,
   *   commands: string[],
   *   setupTimeout: unknown,
   *   logger: Logger | null | undefined,
   *   name: string,
   *   stats?: { backend: 'module' | 'script' | undefined, setupFailures: number },
   * }} options
   */
  constructor(owner, { client, option, commands, setupTimeout, logger, name, stats }) {
    this.owner = owner;
    /** @type {any} */
    this.client = client;
    // A client without sendCommand (RateLimiterRedis's stand-in for one not connected, which is
    // never sent anything) has no adapter: a command sent on it rejects.
    const how = typeof client?.sendCommand === 'function' ? sender(client) : undefined;
    this.adapter = how?.adapter;
    this.cluster = how?.cluster ?? false;
    /** @type {(args: string[], key?: string) => Promise<any>} */
    this.send = how?.send ?? (() => Promise.reject(new Error('the client has no sendCommand')));
    this.option = checkBackend(option);
    /** @type {'module' | 'script' | undefined} */
    this.chosen = this.option === 'script' ? 'script' : undefined;
    this.scripts = commands.map((command) => SCRIPT_OF[command]);
    this.logger = logger;
    this.stats = stats;
    if (stats !== undefined) stats.backend = this.chosen;
    // In the background from now and each time the client is ready again; a call waits for a
    // setup in flight (setupTimeout at most). A failure is logged, never thrown: the calls then
    // ask for themselves.
    this.setup = new Setup(client, {
      work: async () => {
        if ((await this.resolve()) === 'script') await loadScriptsFor(this.option, () => this.load());
      },
      timeoutMs: checkSetupTimeout(setupTimeout),
      failed: (error) => {
        if (stats !== undefined) stats.setupFailures += 1;
        // A server where no backend can run (no Lua, no module): said in its own words, as RateLimit's.
        if (error instanceof ModuleRequiredError) {
          this.logger?.warn?.(`ratelimit: ${error.message}`);
          return;
        }
        this.logger?.warn?.(
          `ratelimit: the setup of ${name} (backend, scripts) failed (${error?.message ?? error}); ` +
            'it runs again when the client is ready again, and until then each call asks what it needs',
        );
      },
    });
  }

  /**
   * The backend, 'module' or 'script': asked at the first call (backend "auto": the scripts are
   * taken once loaded, a server without Lua refuses them), then kept.
   * @returns {Promise<'module' | 'script'>}
   */
  async resolve() {
    if (this.chosen === undefined) {
      this.chosen = await resolveBackend(this.client, this.send, this.option, this.logger, () => this.load());
      if (this.stats !== undefined) this.stats.backend = this.chosen;
    }
    return this.chosen;
  }

  /**
   * The backend, known and usable, before a plain command (SET, DEL, a MULTI) that is the same
   * on both: on the script backend its scripts loaded, so that a server without Lua refuses it
   * with the same clear error as a script call, before anything is written.
   * @returns {Promise<'module' | 'script'>}
   */
  async usable() {
    const chosen = this.chosen ?? (await this.resolve());
    if (chosen === 'script') {
      await this.load().catch((error) => {
        throw scriptingError(error, this.option);
      });
    }
    return chosen;
  }

  /** SCRIPT LOAD of the commands' scripts, once per client (loadScripts), the refusal as it is. */
  load() {
    return loadScripts(this.client, this.send, this.scripts);
  }

  /**
   * The scripts' test clock (µs) a test set as the limiter's TEST_NOW, or undefined.
   * @returns {number | undefined}
   */
  now() {
    const clock = Reflect.get(this.owner, TEST_NOW);
    return typeof clock === 'function' ? clock() : undefined;
  }

  /**
   * A module command (`[command, key, ...words]`) on the backend: as it is, or as its script. A
   * failure rejects as the backend says it (moduleError, scriptingError).
   * @param {string[]} args
   * @returns {Promise<any>}
   */
  async run(args) {
    if ((this.chosen ?? (await this.resolve())) === 'script') {
      return evalScript(this.send, args, this.now()).catch((error) => {
        throw scriptingError(error, this.option);
      });
    }
    return this.send(args).catch((error) => {
      throw moduleError(this.client, error);
    });
  }
}

module.exports = { Backend };
