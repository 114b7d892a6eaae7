// The one list of attacks on the gRPC transport, run by the hostile suite (h2-compare.test.ts, scaled down)
// and by bench/h2-attacks.ts (full size), each against our server and against the node:http2 reference
// (node-h2-server.ts) in the same run. An attack names what it aims at; the suite fails when our server
// does worse than the reference there beyond MARGINS.
import { attackWhenReady, type Measured, measure, newClients, type Running } from './h2-harness.js';

/** What an attack can aim at, as measured on the server under attack. */
export type Aim = 'refused' | 'memory' | 'p99' | 'cpu' | 'open' | 'work' | 'lingering';

/** How an attack went against one server. */
export interface Outcome {
  server: string;
  /** Normal calls (on a connection opened before the attack, and from new clients) that failed. */
  failed: number;
  calls: number;
  /** RSS growth during the attack (the most, less before), MB. */
  rssDeltaMb: number;
  /** p99 of the normal calls, ms. */
  p99Ms: number;
  /** CPU time the server used meanwhile, s. */
  cpuSeconds: number;
  /** The attacker's connections the server left open when the attack ended. */
  open: number;
  /** Calls the server decided for the attacker (decisions counted during the attack, less the normal calls). */
  work: number;
  /**
   * Sockets the server still held {@link LINGER_CHECK_MS} after the attack ended (the attacker has closed
   * all of its connections by then), more than before it.
   */
  lingering: number;
  /** What the attacker saw (how each connection ended, streams sent). */
  result: unknown;
}

/**
 * How much worse than node:http2 ours may do, per aim: `ours <= reference * ratio + slack`. The slack is
 * there because some figures are near zero on the reference and noise on a loaded machine is not.
 */
export const MARGINS: Record<Aim, { ratio: number; slack: number; unit: string }> = {
  /** Normal calls failed: at most 2 more (of a few hundred). */
  refused: { ratio: 1, slack: 2, unit: 'calls' },
  /** RSS growth: 1.5× and 25 MB. */
  memory: { ratio: 1.5, slack: 25, unit: 'MB' },
  /** p99 of normal calls: 2× and 100 ms (a loaded 2-core machine moves a p99 by tens of ms). */
  p99: { ratio: 2, slack: 100, unit: 'ms' },
  /** CPU time: 1.5× and 1 s. */
  cpu: { ratio: 1.5, slack: 1, unit: 's' },
  /** The attacker's connections left open: none more. */
  open: { ratio: 1, slack: 0, unit: 'connections' },
  /** Calls decided for one attacking connection: 1.25× and 2,500 (the reset budget's burst, 2,000, and a batch). */
  work: { ratio: 1.25, slack: 2500, unit: 'decisions' },
  /**
   * Connections the attacker closed that the server still holds half a second later: 20 more (a loaded
   * machine may not have run the last closes yet). Each one held is a socket, a session and their buffers.
   */
  lingering: { ratio: 1, slack: 20, unit: 'sockets' },
};

/** An attack's size: `test` for the suite (seconds), `full` for the bench. */
export type Scale = 'test' | 'full';

export interface Attack {
  name: string;
  aims: readonly Aim[];
  /** Margins of this attack that differ from `MARGINS`, each with the reason in a comment where it is set. */
  margins?: Partial<Record<Aim, (typeof MARGINS)[Aim]>>;
  /** Runs against TLS servers (the gRPC port with a certificate). */
  tls?: boolean;
  /** The attack proper; resolves to what the attacker saw, with how many new clients failed. */
  run(target: Running, scale: Scale): Promise<Ran>;
}

type Outcomes = { outcomes?: Record<string, number> };

/** What the attacker printed, and how the new normal clients made during it fared. */
interface Ran {
  result: unknown;
  newClients?: { count: number; failed: number };
}

const sized = (scale: Scale, test: number, full: number) => (scale === 'test' ? test : full);

/** An attack of h2-attack.py that runs to its end. */
function plain(mode: string, args: (scale: Scale) => Array<string | number>): Attack['run'] {
  return async (target, scale) => ({
    result: await attackWhenReady(undefined, mode, target.grpcPort, ...args(scale)),
  });
}

/**
 * An attack that holds connections: once they are open, `clients` new normal clients connect and make a
 * call each (from 127.0.0.1; the attacker connects from 127.0.0.2).
 */
function holding(mode: string, clients: number, args: (scale: Scale) => Array<string | number>): Attack['run'] {
  return async (target, scale) => {
    let probe: Promise<number> = Promise.resolve(0);
    const result = await attackWhenReady(
      () => {
        probe = newClients(target, clients);
      },
      mode,
      target.grpcPort,
      ...args(scale),
    );
    return { result, newClients: { count: clients, failed: await probe } };
  };
}

const FLOOD_SECONDS = (scale: Scale) => sized(scale, 2, 10);
const FLOOD_DRAIN = (scale: Scale) => sized(scale, 2, 5);

/** The attacks, the earlier issue's and the later ones, in the order they run. */
export const ATTACKS: readonly Attack[] = [
  ...(['ping', 'settings'] as const).map(
    (kind): Attack => ({
      name: `${kind.toUpperCase()} flood, connections that never read`,
      aims: ['refused', 'memory', 'p99', 'open'],
      run: plain('flood', (s) => [kind, sized(s, 10, 50), FLOOD_SECONDS(s), FLOOD_DRAIN(s)]),
    }),
  ),
  ...(['windowupdate', 'emptydata', 'priority'] as const).map(
    (kind): Attack => ({
      name: `${{ windowupdate: 'WINDOW_UPDATE', emptydata: 'empty DATA (CVE-2019-9518)', priority: 'PRIORITY' }[kind]} flood`,
      aims: ['refused', 'p99', 'cpu', 'open'],
      run: plain('ctlflood', (s) => [kind, sized(s, 4, 8), FLOOD_SECONDS(s), FLOOD_DRAIN(s)]),
    }),
  ),
  {
    name: 'slowloris: a frame one byte a second',
    aims: ['refused', 'memory', 'open'],
    run: plain('slowloris', (s) => [sized(s, 100, 1000), sized(s, 3, 15)]),
  },
  {
    name: 'unfinished 240 kB header blocks',
    aims: ['refused', 'memory', 'open'],
    run: plain('headerblock', (s) => [sized(s, 100, 400), 240, sized(s, 6, 15)]),
  },
  {
    name: 'connections that open no stream',
    aims: ['refused', 'memory', 'open'],
    run: plain('nostream', (s) => [sized(s, 200, 1000), sized(s, 6, 40)]),
  },
  {
    name: 'rapid reset (CVE-2023-44487), one connection',
    aims: ['refused', 'p99', 'work'],
    run: plain('rapidreset', (s) => [sized(s, 5000, 200_000), sized(s, 8, 60)]),
  },
  {
    name: 'MadeYouReset (CVE-2025-8671): WINDOW_UPDATE of 0 after each call',
    aims: ['refused', 'work'],
    run: plain('madeyoureset', (s) => [sized(s, 20_000, 200_000), sized(s, 5, 60)]),
  },
  {
    name: 'one client holds idle connections past the connection cap',
    // Normal clients refused, and memory: ours ends idle connections to make room and the client reopens
    // them (thousands over the attack), where node:http2 holds them all and churns none; each ended
    // connection must be let go once the client closes it, not held until its linger timer cuts it
    // (5 s: held so, some 10 KB each, they took ours 60-100 MB above node:http2), hence `lingering`.
    aims: ['refused', 'memory', 'lingering'],
    // The churn allocates as it goes (thousands of connections opened, ended and collected: +9 to +45 MB
    // of peak RSS over 20 s in CI runs, the most when other test files load the machine, against
    // node:http2's +0 to +19 MB holding all of them); what must not happen is ended connections staying
    // held, which `lingering` catches. 60 MB over node:http2, not 25.
    margins: { memory: { ratio: 1.5, slack: 60, unit: 'MB' } },
    run: holding('idlehold', 20, (s) => [sized(s, 400, 5000), sized(s, 3, 30), '127.0.0.2']),
  },
  {
    name: 'held slow streams: many streams per connection, one byte a second',
    aims: ['refused', 'memory', 'p99'],
    run: plain('slowstreams', (s) => [sized(s, 20, 60), sized(s, 500, 1000), sized(s, 4, 15)]),
  },
  {
    name: 'stalled TLS handshakes',
    aims: ['refused', 'memory'],
    tls: true,
    run: holding('tlsstall', 10, (s) => [sized(s, 600, 5000), sized(s, 3, 15)]),
  },
];

/** How long after an attack the sockets the server holds are counted, ms. */
export const LINGER_CHECK_MS = 500;

const DECISIONS = /floodgate_decisions_total\{[^}]*outcome="allowed"\} (\d+)/;

/** Runs `attack` against `target` with normal calls measured alongside. */
export async function runAttack(target: Running, attack: Attack, scale: Scale): Promise<Outcome> {
  const decisionsBefore = await target.metric(DECISIONS);
  const socketsBefore = target.sockets();
  const m: Measured<Ran> = await measure(target, () => attack.run(target, scale));
  await new Promise((resolve) => setTimeout(resolve, LINGER_CHECK_MS));
  const lingering = Math.max(0, target.sockets() - socketsBefore);
  const decisions = (await target.metric(DECISIONS)) - decisionsBefore;
  const newClients = m.result.newClients ?? { count: 0, failed: 0 };
  const newFailed = newClients.failed;
  const result = m.result.result as Outcomes;
  return {
    server: target.name,
    failed: m.failed + newFailed,
    calls: m.calls,
    rssDeltaMb: Math.max(0, m.rssMaxMb - m.rssBeforeMb),
    p99Ms: m.p99Ms,
    cpuSeconds: m.cpuSeconds,
    open: result.outcomes?.open ?? 0,
    // The warm-up call and the normal calls answered were decided too.
    work: Math.max(0, decisions - (m.calls - m.failed) - 1 - (newClients.count - newFailed)),
    lingering,
    result: m.result.result,
  };
}

/** The figure of `outcome` an aim looks at. */
export function figure(outcome: Outcome, aim: Aim): number {
  switch (aim) {
    case 'refused':
      return outcome.failed;
    case 'memory':
      return outcome.rssDeltaMb;
    case 'p99':
      return outcome.p99Ms;
    case 'cpu':
      return outcome.cpuSeconds;
    case 'open':
      return outcome.open;
    case 'work':
      return outcome.work;
    case 'lingering':
      return outcome.lingering;
  }
}

/** The aims on which ours did worse than the reference beyond its margin, each said in words. */
export function worse(attack: Attack, ours: Outcome, reference: Outcome): string[] {
  const out: string[] = [];
  for (const aim of attack.aims) {
    const margin = attack.margins?.[aim] ?? MARGINS[aim];
    const a = figure(ours, aim);
    const b = figure(reference, aim);
    const bound = b * margin.ratio + margin.slack;
    if (!(a <= bound))
      out.push(`${aim}: ours ${a.toFixed(1)} > ${bound.toFixed(1)} ${margin.unit} (node:http2 ${b.toFixed(1)})`);
  }
  return out;
}

/** One row of the comparison table (markdown). */
export function row(attack: Attack, ours: Outcome, reference: Outcome): string {
  const show = (o: Outcome) =>
    `${o.failed}/${o.calls} failed, +${o.rssDeltaMb.toFixed(0)} MB, p99 ${o.p99Ms.toFixed(0)} ms, ${o.cpuSeconds.toFixed(1)} s CPU, ${o.open} open, ${o.work} decided, ${o.lingering} lingering`;
  return `| ${attack.name} | ${attack.aims.join(', ')} | ${show(ours)} | ${show(reference)} |`;
}
