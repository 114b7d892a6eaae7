import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';

/** Options of the admin API (see docs/service.md, "Admin API"). */
export interface AdminOptions {
  /** One admin bearer token (e.g. from `FLOODGATE_ADMIN_TOKEN`); its id in the audit log is `env`. */
  token?: string;
  /**
   * A file of admin tokens, one a line: `<id> <token>` (or the token alone, id `line-<n>`); `#` starts
   * a comment. Read at start.
   */
  tokenFile?: string;
  /**
   * Subjects (certificate common names) of client certificates admitted as admins, when the HTTP API
   * serves HTTPS with client certificates (`httpTls.clientCaFile`).
   */
  certSubjects?: readonly string[];
  /** How often each process reads the overrides' change counter, ms. @default 500 */
  refreshMs?: number;
}

/** Shortest token accepted: 16 characters (a token is a secret, not a password to remember). */
export const MIN_TOKEN_LENGTH = 16;

/** An admin API setting the service refuses at start. */
export class AdminConfigError extends Error {
  override readonly name = 'AdminConfigError';
}

/** Who made an admin call: `token:<id>` or `cert:<subject>`. */
export type AdminIdentity = string;

/** The outcome of authenticating one request. */
export type AdminAuthResult = { ok: true; who: AdminIdentity } | { ok: false; status: 401 | 403; detail: string };

/**
 * Authenticates admin calls: a bearer token compared in constant time with every configured token
 * (digests of equal length, all compared, so timing tells nothing of which or how much matched), or a
 * verified client certificate whose subject is listed.
 */
export class AdminAuth {
  private readonly tokens: { id: string; digest: Buffer }[] = [];
  private readonly subjects: ReadonlySet<string>;

  constructor(options: AdminOptions) {
    if (options.token !== undefined) this.add('env', options.token);
    if (options.tokenFile !== undefined) {
      let text: string;
      try {
        text = readFileSync(options.tokenFile, 'utf8');
      } catch (error) {
        throw new AdminConfigError(
          `cannot read the admin token file ${JSON.stringify(options.tokenFile)}: ${(error as Error).message}`,
        );
      }
      for (const [n, raw] of text.split('\n').entries()) {
        const line = raw.trim();
        if (line === '' || line.startsWith('#')) continue;
        const parts = line.split(/\s+/);
        if (parts.length > 2)
          throw new AdminConfigError(`admin token file line ${n + 1}: expected "<id> <token>" or "<token>"`);
        if (parts.length === 2) this.add(parts[0] as string, parts[1] as string, n + 1);
        else this.add(`line-${n + 1}`, parts[0] as string, n + 1);
      }
    }
    this.subjects = new Set(options.certSubjects ?? []);
    if (this.tokens.length === 0 && this.subjects.size === 0) {
      throw new AdminConfigError('the admin API needs a token, a token file with a token, or certificate subjects');
    }
  }

  private add(id: string, token: string, line?: number): void {
    const where = line === undefined ? 'the admin token' : `admin token file line ${line}`;
    if (token.length < MIN_TOKEN_LENGTH || !/^[\x21-\x7e]+$/.test(token)) {
      throw new AdminConfigError(`${where}: a token must be ${MIN_TOKEN_LENGTH} or more printable ASCII characters`);
    }
    if (!/^[A-Za-z0-9_.-]{1,64}$/.test(id))
      throw new AdminConfigError(`${where}: an id is 1 to 64 of A-Z a-z 0-9 _ . -`);
    this.tokens.push({ id, digest: digest(token) });
  }

  /** Authenticates a request: its bearer token, else its verified client certificate. */
  authenticate(req: IncomingMessage): AdminAuthResult {
    const header = req.headers.authorization;
    if (header !== undefined) {
      const match = /^Bearer ([\x21-\x7e]{1,1024})$/i.exec(header);
      if (match === null)
        return { ok: false, status: 401, detail: 'the Authorization header must be "Bearer <token>"' };
      const presented = digest(match[1] as string);
      let found: string | undefined;
      for (const t of this.tokens) {
        if (timingSafeEqual(t.digest, presented) && found === undefined) found = t.id;
      }
      return found === undefined
        ? { ok: false, status: 401, detail: 'the bearer token is not an admin token' }
        : { ok: true, who: `token:${found}` };
    }
    const subject = certSubject(req);
    if (subject !== undefined) {
      return this.subjects.has(subject)
        ? { ok: true, who: `cert:${subject}` }
        : { ok: false, status: 403, detail: 'the client certificate is not an admin certificate' };
    }
    return { ok: false, status: 401, detail: 'admin calls need a bearer token or an admin client certificate' };
  }
}

function digest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

/** The common name of a verified client certificate, when the connection has one. */
function certSubject(req: IncomingMessage): string | undefined {
  const socket = req.socket as Partial<TLSSocket>;
  if (socket.authorized !== true || typeof socket.getPeerCertificate !== 'function') return undefined;
  const cn = socket.getPeerCertificate().subject?.CN;
  return typeof cn === 'string' && cn !== '' ? cn : Array.isArray(cn) ? (cn[0] as string) : undefined;
}
