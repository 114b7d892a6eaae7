// Login attempts with a penalty box. Two limiters, two keys: per account (5 attempts in 15 minutes) against
// guessing one password, per IP address (20 attempts in an hour) against one address trying many accounts.
// Both are sliding logs that count denied attempts too (`countDenied`: a client that keeps hammering stays
// shut out) and, once denied, stay denied for a while (`blockMs`). A manual clock stands in for time.
//
//   npm run build && npx tsx packages/floodgate/examples/login-attempts.ts
import { createLimiter, type Decision, slidingLog } from 'floodgate';
import { manualClock } from 'floodgate/testing';

const MINUTE = 60_000;
const clock = manualClock({ startMs: Date.UTC(2030, 0, 1, 12) });

const perAccount = createLimiter({
  prefix: 'login-account',
  clock,
  policies: slidingLog({ name: 'account', limit: 5, windowMs: 15 * MINUTE, countDenied: true, blockMs: 15 * MINUTE }),
});
const perIp = createLimiter({
  prefix: 'login-ip',
  clock,
  policies: slidingLog({ name: 'ip', limit: 20, windowMs: 60 * MINUTE, countDenied: true, blockMs: 60 * MINUTE }),
});

const passwords = new Map([['alice', 'correct horse battery staple']]);

/** Every attempt is charged before the password is looked at, so a locked key learns nothing. */
function attemptLogin(account: string, ip: string, password: string): string {
  // The IP first: an address that is shut out cannot lock accounts.
  const byIp = perIp.limitSync(ip);
  if (!byIp.allowed) return refused(byIp);
  const byAccount = perAccount.limitSync(account);
  if (!byAccount.allowed) return refused(byAccount);
  if (passwords.get(account) !== password) return `401 wrong password (attempts left: ${byAccount.remaining})`;
  // A successful login forgets the account's failures.
  perAccount.resetSync(account);
  return '200 welcome';
}

function refused(decision: Decision): string {
  const wait = Math.ceil(decision.retryAfterMs / 1000);
  return `429 ${decision.reason} by ${decision.policy}, retry in ${Math.floor(wait / 60)} min ${wait % 60} s`;
}

function log(account: string, ip: string, outcome: string): void {
  const time = new Date(clock.nowMs()).toISOString().slice(11, 19);
  console.log(`${time} ${account.padEnd(8)} from ${ip.padEnd(13)} → ${outcome}`);
}

// 1. Someone guesses alice's password from one address, one guess every 10 seconds.
for (let guess = 1; guess <= 7; guess++) {
  log('alice', '203.0.113.9', attemptLogin('alice', '203.0.113.9', `guess-${guess}`));
  clock.advance(10_000);
}

// 2. Alice herself, five minutes later, from her own address: the account is still in the penalty box.
//    (The price of locking by account; a shorter blockMs or a per account-and-IP key softens it.)
clock.set(Date.UTC(2030, 0, 1, 12, 5));
log('alice', '198.51.100.7', attemptLogin('alice', '198.51.100.7', 'correct horse battery staple'));

// 3. Once the block is over, she gets in, and her account's count starts afresh.
clock.set(Date.UTC(2030, 0, 1, 12, 16));
log('alice', '198.51.100.7', attemptLogin('alice', '198.51.100.7', 'correct horse battery staple'));

// 4. The same address now tries one password on many accounts (credential stuffing): no account sees more
//    than one attempt, but the address is refused on its 21st attempt within the hour.
clock.set(Date.UTC(2030, 0, 1, 12, 20));
for (let user = 1; user <= 16; user++) {
  const outcome = attemptLogin(`user${user}`, '203.0.113.9', 'password1');
  if (user <= 2 || outcome.startsWith('429')) log(`user${user}`, '203.0.113.9', outcome);
  clock.advance(2_000);
}

// 5. Other addresses are not affected.
log('user1', '192.0.2.44', attemptLogin('user1', '192.0.2.44', 'hunter2'));
