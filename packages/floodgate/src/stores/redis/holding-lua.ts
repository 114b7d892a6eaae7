import { createHash } from 'node:crypto';
import { PERMIT_ACQUIRE_SCRIPT, PERMIT_RELEASE_SCRIPT } from './permits-lua.js';
import { DECIDE_SCRIPT } from './script.js';

/**
 * A `limit` and a concurrency permit, all or nothing, in one script (`Store.decideWithPermit`): the
 * permit's acquire script, the decision script and the permit's release script, each run unchanged as a
 * Lua function of its own KEYS and ARGV, in the order a limiter's two calls take them:
 *
 * 1. the acquire (it sweeps the key's expired leases and waiters first);
 * 2. the decision of the one call: charged (op limit) when the permit was granted, a check (op check:
 *    nothing written) when it was refused;
 * 3. when the permit was granted and the decision is not an admission (a denial, or the call's GET or
 *    SET failed), the release of the lease just granted, at the acquire's time.
 *
 * KEYS: the permit's seven keys (permits-lua.ts), then the decision's (lua/main.ts). All of them are
 * `<prefix>:{<encoded key>}:…`, one hash tag, so one Redis Cluster slot.
 * ARGV: [1] A, the acquire's argument count; [2] R, the release's; [3] the position of the op among the
 * decision's arguments; then the acquire's A arguments, the release's R (its time, first, is replaced by
 * the acquire's) and the decision's.
 * Returns the acquire's reply (8 numbers, permits-lua.ts) followed by the decision's (lua/main.ts).
 */
export const HOLDING_SCRIPT = `-- floodgate: a decision and a concurrency permit, all or nothing
local function permit_acquire(KEYS, ARGV)
${PERMIT_ACQUIRE_SCRIPT}
end
local function permit_release(KEYS, ARGV)
${PERMIT_RELEASE_SCRIPT}
end
local function decide_calls(KEYS, ARGV)
${DECIDE_SCRIPT}
end
local na, nr, op_at = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local acquire_argv, release_argv, decide_argv = {}, {}, {}
for i = 1, na do acquire_argv[i] = ARGV[3 + i] end
for i = 1, nr do release_argv[i] = ARGV[3 + na + i] end
for i = 4 + na + nr, #ARGV do decide_argv[#decide_argv + 1] = ARGV[i] end
local permit_keys, rate_keys = {}, {}
for i = 1, 7 do permit_keys[i] = KEYS[i] end
for i = 8, #KEYS do rate_keys[#rate_keys + 1] = KEYS[i] end
local permit = permit_acquire(permit_keys, acquire_argv)
local granted = permit[1] == 1
if not granted then decide_argv[op_at] = '0' end
local decided = decide_calls(rate_keys, decide_argv)
if granted and decided[1] ~= 1 then
  release_argv[1] = string.format('%.17g', permit[5])
  permit_release(permit_keys, release_argv)
end
for i = 1, #decided do permit[#permit + 1] = decided[i] end
return permit
`;

/** SHA-1 of {@link HOLDING_SCRIPT}, as `EVALSHA` names it. */
export const HOLDING_SCRIPT_SHA = createHash('sha1').update(HOLDING_SCRIPT).digest('hex');
