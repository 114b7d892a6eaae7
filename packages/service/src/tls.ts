import { constants, createHash, createPrivateKey, type KeyObject, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP, type Socket } from 'node:net';
import {
  createSecureContext,
  type TlsOptions as NodeTlsOptions,
  type TLSSocket,
  type Server as TlsServer,
} from 'node:tls';
import type { ServiceContext } from './context.js';
import type { Api } from './metrics.js';

/**
 * TLS on one of the service's ports: the server's certificate and key, and optionally a CA that client
 * certificates must chain to (mutual TLS). Files are PEM; they are read at start and again on reload.
 */
export interface TlsOptions {
  /** PEM file with the server's certificate, followed by any intermediate certificates it needs. */
  certFile: string;
  /** PEM file with the private key of that certificate (not encrypted). */
  keyFile: string;
  /**
   * PEM file with the CA certificate(s) that client certificates must chain to. With it, every client
   * must present a valid certificate from one of them (mutual TLS), or its handshake fails; without it,
   * no client certificate is asked for.
   */
  clientCaFile?: string;
  /**
   * With `clientCaFile`: a client certificate must also carry this subject alternative name (a DNS name,
   * a URI such as a SPIFFE id, an IP address or an email address, compared exactly; DNS names ignoring
   * case). Other clients of the same CA are disconnected right after their handshake.
   */
  clientSan?: string;
  /**
   * Longest time a client may take to complete its TLS handshake, in ms; past it the connection is cut.
   * @default 10_000
   */
  handshakeTimeoutMs?: number;
  /**
   * Most TLS handshakes under way at once on the port. A new connection past it ends the oldest
   * handshake still under way: an honest handshake takes milliseconds, so the one that has waited longest
   * is the likeliest to be stalled on purpose, and stalled ones cannot keep new clients out (each holds
   * about 45 KB until its timeout).
   * @default 512
   */
  maxHandshakes?: number;
}

/** Default of {@link TlsOptions.maxHandshakes}. */
export const DEFAULT_TLS_MAX_HANDSHAKES = 512;

/** Default of {@link TlsOptions.handshakeTimeoutMs}. */
export const DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS = 10_000;

/** What went wrong with a TLS option. */
export type TlsErrorCode = 'ERR_TLS_OPTION' | 'ERR_TLS_FILE_UNREADABLE' | 'ERR_TLS_FILE_INVALID';

/**
 * A TLS option the service cannot use: a file that cannot be read or does not hold what it should (a
 * certificate, a key that matches it, CA certificates), or a bad option value. `option` names the option
 * (`grpcTls.certFile`, …) and `file` the path; the CLI exits with its config-error code (3).
 */
export class TlsError extends Error {
  override readonly name = 'TlsError';

  constructor(
    readonly code: TlsErrorCode,
    /** The option, as `grpcTls.certFile` or `httpTls.clientCaFile`. */
    readonly option: string,
    /** The file named by the option (or the option's value when it is not a file). */
    readonly file: string,
    /** What is wrong, without the option and file. */
    readonly reason: string,
    cause?: unknown,
  ) {
    super(`${option} ${JSON.stringify(file)}: ${reason}`, cause === undefined ? undefined : { cause });
  }
}

/** The outcome of reloading one port's certificates. */
export interface TlsReloadResult {
  /** The port's option: `grpcTls` or `httpTls`. */
  readonly option: string;
  readonly ok: boolean;
  /** False when no file had changed. */
  readonly changed: boolean;
  /** SHA-256 fingerprint of the certificate served after the reload (colon-separated hex, as Node prints it). */
  readonly fingerprint256: string;
  readonly error?: TlsError;
}

/**
 * Why a TLS connection was refused: its handshake failed (`handshake`: no client certificate, one from
 * another CA, no common protocol or version, not TLS at all) or did not finish in time
 * (`handshake_timeout`) or was the oldest under way when {@link TlsOptions.maxHandshakes} were
 * (`handshake_limit`); it did not choose HTTP/2 by ALPN on the gRPC port (`alpn`); its certificate
 * lacks the required subject alternative name (`client_san`).
 */
export type TlsRefusal = 'handshake' | 'handshake_timeout' | 'handshake_limit' | 'alpn' | 'client_san';

/** Counts, logs (at debug level: clients choose to fail) and closes a refused TLS connection. */
export function refuseTls(ctx: ServiceContext, api: Api, socket: Socket, reason: TlsRefusal, error?: Error): void {
  ctx.metrics.tlsRefused(api, reason);
  if (ctx.logger.isLevelEnabled('debug')) {
    ctx.logger.debug({ api, reason, remoteAddress: socket.remoteAddress, err: error }, 'TLS connection refused');
  }
  socket.destroy();
}

/** Files as read, checked, and described. */
interface Material {
  readonly cert: Buffer;
  readonly key: Buffer;
  readonly ca: Buffer | undefined;
  /** SHA-256 of all the files' bytes: a reload that reads the same bytes changes nothing. */
  readonly digest: string;
  readonly fingerprint256: string;
  /** When the server certificate expires. */
  readonly validTo: Date;
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/**
 * The TLS credentials of one port: read and checked from files, given to the port's server, and swapped
 * on reload (`setSecureContext`, which leaves connections already open as they are).
 */
export class TlsCredentials {
  private material: Material | undefined;
  private readonly servers: TlsServer[] = [];
  /** The handshakes under way on each attached server. */
  private readonly handshakes: Map<string, Socket>[] = [];
  readonly handshakeTimeoutMs: number;
  readonly maxHandshakes: number;

  /**
   * @param option the option's name, used in errors: `grpcTls` or `httpTls`
   * @throws TlsError when an option is missing or malformed (files are not read here)
   */
  constructor(
    readonly option: string,
    readonly options: TlsOptions,
  ) {
    for (const name of ['certFile', 'keyFile', 'clientCaFile', 'clientSan'] as const) {
      const value = options[name];
      if (value === undefined && (name === 'clientCaFile' || name === 'clientSan')) continue;
      if (typeof value !== 'string' || value.trim() === '') {
        throw new TlsError('ERR_TLS_OPTION', `${option}.${name}`, String(value), 'must be a non-empty string');
      }
    }
    if (options.clientSan !== undefined && options.clientCaFile === undefined) {
      throw new TlsError(
        'ERR_TLS_OPTION',
        `${option}.clientSan`,
        options.clientSan,
        'checks client certificates, so it needs clientCaFile (mutual TLS)',
      );
    }
    const timeout = options.handshakeTimeoutMs ?? DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS;
    if (!Number.isInteger(timeout) || timeout < 1) {
      throw new TlsError(
        'ERR_TLS_OPTION',
        `${option}.handshakeTimeoutMs`,
        String(timeout),
        'must be a whole number of milliseconds, at least 1',
      );
    }
    this.handshakeTimeoutMs = timeout;
    const maxHandshakes = options.maxHandshakes ?? DEFAULT_TLS_MAX_HANDSHAKES;
    if (!Number.isInteger(maxHandshakes) || maxHandshakes < 1) {
      throw new TlsError(
        'ERR_TLS_OPTION',
        `${option}.maxHandshakes`,
        String(maxHandshakes),
        'must be a whole number, at least 1',
      );
    }
    this.maxHandshakes = maxHandshakes;
  }

  /** Whether clients must present a certificate. */
  get mutual(): boolean {
    return this.options.clientCaFile !== undefined;
  }

  /** SHA-256 fingerprint of the certificate being served. */
  get fingerprint256(): string {
    return this.loaded().fingerprint256;
  }

  /** When the certificate being served expires. */
  get validTo(): Date {
    return this.loaded().validTo;
  }

  /**
   * Reads and checks the files.
   * @throws TlsError naming the option and file that cannot be used
   */
  load(): void {
    this.material = this.read();
  }

  /**
   * Options for `tls.createServer` or `https.createServer`: the credentials, client certificates
   * required and verified when there is a client CA, `alpn` as the only application protocols, and the
   * handshake timeout.
   */
  serverOptions(alpn: readonly string[]): NodeTlsOptions & { noDelay: boolean } {
    const material = this.loaded();
    return {
      ...secureContextOptions(material),
      requestCert: this.mutual,
      rejectUnauthorized: this.mutual,
      ALPNProtocols: [...alpn],
      handshakeTimeout: this.handshakeTimeoutMs,
      // Small answers go out at once: Nagle's algorithm would hold them for the peer's delayed ACK.
      noDelay: true,
    };
  }

  /**
   * Remembers a server made with {@link serverOptions}, so a reload reaches it; hears of the handshakes
   * that fail on it (no certificate, another CA, no common protocol, not TLS at all, too slow), and keeps
   * the handshakes under way to {@link TlsOptions.maxHandshakes}.
   */
  attach(server: TlsServer, onRefused: (reason: TlsRefusal, error: Error | undefined, socket: Socket) => void): void {
    this.servers.push(server);
    // Connections whose handshake is under way, oldest first, by peer address and port (what a raw
    // socket and the TLS socket over it both tell).
    const handshaking = new Map<string, Socket>();
    this.handshakes.push(handshaking);
    // Each connection ended for the limit reports ECONNRESET below, which is then not counted again.
    let ended = 0;
    server.on('connection', (raw: Socket) => {
      if (handshaking.size >= this.maxHandshakes) {
        const oldest = handshaking.entries().next().value as [string, Socket];
        handshaking.delete(oldest[0]);
        ended++;
        onRefused('handshake_limit', undefined, oldest[1]);
      }
      const key = `${raw.remoteAddress}|${raw.remotePort}`;
      handshaking.set(key, raw);
      raw.once('close', () => {
        if (handshaking.get(key) === raw) handshaking.delete(key);
      });
    });
    server.on('secureConnection', (socket: TLSSocket) => {
      handshaking.delete(`${socket.remoteAddress}|${socket.remotePort}`);
    });
    server.on('tlsClientError', (error: Error & { code?: string }, socket: TLSSocket) => {
      if (error.code === 'ECONNRESET' && ended > 0) {
        ended--;
        return;
      }
      onRefused(error.code === 'ERR_TLS_HANDSHAKE_TIMEOUT' ? 'handshake_timeout' : 'handshake', error, socket);
    });
  }

  /**
   * Cuts the connections whose handshake is still under way (on shutdown: they carry no call, and would
   * hold the closing server until their timeout).
   */
  endHandshakes(): void {
    for (const handshaking of this.handshakes) {
      for (const socket of handshaking.values()) socket.destroy();
      handshaking.clear();
    }
  }

  /** Whether a connection whose handshake is done may go on: with `clientSan`, its certificate must carry it. */
  admit(socket: TLSSocket): boolean {
    const san = this.options.clientSan;
    if (san === undefined) return true;
    const certificate = socket.getPeerX509Certificate();
    return certificate !== undefined && hasSubjectAltName(certificate, san);
  }

  /**
   * Reads the files again; when they changed and are good, the attached servers serve them to new
   * connections (open ones keep theirs). Files that cannot be used leave the credentials in use as they
   * are, and the error is returned.
   */
  reload(): TlsReloadResult {
    const current = this.loaded();
    let next: Material;
    try {
      const digest = this.digest();
      if (digest === current.digest) {
        return { option: this.option, ok: true, changed: false, fingerprint256: current.fingerprint256 };
      }
      next = this.read();
    } catch (error) {
      return {
        option: this.option,
        ok: false,
        changed: true,
        fingerprint256: current.fingerprint256,
        error: error as TlsError,
      };
    }
    for (const server of this.servers) server.setSecureContext(secureContextOptions(next));
    this.material = next;
    return { option: this.option, ok: true, changed: true, fingerprint256: next.fingerprint256 };
  }

  /** The files named by the options, for watching. */
  files(): string[] {
    const { certFile, keyFile, clientCaFile } = this.options;
    return clientCaFile === undefined ? [certFile, keyFile] : [certFile, keyFile, clientCaFile];
  }

  private loaded(): Material {
    if (this.material === undefined) throw new Error(`${this.option}: load() the credentials first`);
    return this.material;
  }

  private readFile(name: 'certFile' | 'keyFile' | 'clientCaFile'): Buffer {
    const file = this.options[name] as string;
    try {
      return readFileSync(file);
    } catch (error) {
      const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
      throw new TlsError(
        'ERR_TLS_FILE_UNREADABLE',
        `${this.option}.${name}`,
        file,
        `cannot be read (${reason})`,
        error,
      );
    }
  }

  private digest(): string {
    const hash = createHash('sha256');
    for (const name of ['certFile', 'keyFile', 'clientCaFile'] as const) {
      if (this.options[name] !== undefined) hash.update(this.readFile(name)).update('\0');
    }
    return hash.digest('hex');
  }

  private read(): Material {
    const { option } = this;
    const cert = this.readFile('certFile');
    const key = this.readFile('keyFile');
    const ca = this.options.clientCaFile === undefined ? undefined : this.readFile('clientCaFile');
    const invalid = (name: string, file: string, reason: string, cause?: unknown) =>
      new TlsError('ERR_TLS_FILE_INVALID', `${option}.${name}`, file, reason, cause);
    const certs = pemCertificates(cert);
    if (certs.length === 0) throw invalid('certFile', this.options.certFile, 'holds no PEM certificate');
    let leaf: X509Certificate;
    try {
      leaf = new X509Certificate(certs[0] as string);
      for (const other of certs.slice(1)) new X509Certificate(other);
    } catch (error) {
      throw invalid(
        'certFile',
        this.options.certFile,
        `holds a certificate that cannot be parsed: ${reasonOf(error)}`,
        error,
      );
    }
    let privateKey: KeyObject;
    try {
      privateKey = createPrivateKey(key);
    } catch (error) {
      throw invalid('keyFile', this.options.keyFile, `holds no usable private key: ${reasonOf(error)}`, error);
    }
    if (!leaf.checkPrivateKey(privateKey)) {
      throw invalid('keyFile', this.options.keyFile, `is not the key of the certificate in ${this.options.certFile}`);
    }
    if (ca !== undefined) {
      const file = this.options.clientCaFile as string;
      const cas = pemCertificates(ca);
      if (cas.length === 0) throw invalid('clientCaFile', file, 'holds no PEM certificate');
      try {
        for (const one of cas) new X509Certificate(one);
      } catch (error) {
        throw invalid('clientCaFile', file, `holds a certificate that cannot be parsed: ${reasonOf(error)}`, error);
      }
    }
    const digest = createHash('sha256');
    for (const bytes of ca === undefined ? [cert, key] : [cert, key, ca]) digest.update(bytes).update('\0');
    const material: Material = {
      cert,
      key,
      ca,
      digest: digest.digest('hex'),
      fingerprint256: leaf.fingerprint256,
      validTo: new Date(leaf.validTo),
    };
    try {
      // What the server will do with them: OpenSSL's own checks, so a reload cannot fail later.
      createSecureContext(secureContextOptions(material));
    } catch (error) {
      throw invalid('certFile', this.options.certFile, `cannot be used with its key: ${reasonOf(error)}`, error);
    }
    return material;
  }
}

/**
 * The secure context: the files, TLS 1.2 at least and no renegotiation (RFC 9113 §9.2; a renegotiation
 * is also a handshake's CPU cost that a client could ask for again and again on one connection). All of
 * it is given again on reload, since `setSecureContext` resets what it is not given.
 */
function secureContextOptions(material: Material): NodeTlsOptions {
  return {
    cert: material.cert,
    key: material.key,
    ...(material.ca === undefined ? {} : { ca: material.ca }),
    minVersion: 'TLSv1.2',
    secureOptions: constants.SSL_OP_NO_RENEGOTIATION,
  };
}

function pemCertificates(bytes: Buffer): string[] {
  return bytes.toString('latin1').match(PEM_CERTIFICATE) ?? [];
}

function reasonOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Whether the certificate names `san` among its subject alternative names (DNS names ignoring case). */
export function hasSubjectAltName(certificate: X509Certificate, san: string): boolean {
  const list = certificate.subjectAltName;
  if (list === undefined) return false;
  const ip = isIP(san) !== 0;
  for (const entry of splitSubjectAltName(list)) {
    const colon = entry.indexOf(':');
    const type = entry.slice(0, colon);
    const value = entry.slice(colon + 1);
    if (type === 'DNS' && value.toLowerCase() === san.toLowerCase()) return true;
    if ((type === 'URI' || type === 'email') && value === san) return true;
    if (type === 'IP Address' && ip && value === san) return true;
  }
  return false;
}

/**
 * Splits Node's `subjectAltName` text (`DNS:a, URI:b`). Node quotes a value holding a comma or a quote
 * as a JSON string (`URI:"a,b"`), so a client cannot smuggle a second name into one entry.
 */
function splitSubjectAltName(list: string): string[] {
  const entries: string[] = [];
  let i = 0;
  while (i < list.length) {
    const colon = list.indexOf(':', i);
    if (colon === -1) break;
    const type = list.slice(i, colon);
    let value: string;
    let end: number;
    if (list[colon + 1] === '"') {
      // A JSON string: find its closing quote, skipping escaped characters.
      let j = colon + 2;
      while (j < list.length && list[j] !== '"') j += list[j] === '\\' ? 2 : 1;
      try {
        value = JSON.parse(list.slice(colon + 1, j + 1)) as string;
      } catch {
        return entries;
      }
      end = j + 1;
    } else {
      const comma = list.indexOf(', ', colon);
      end = comma === -1 ? list.length : comma;
      value = list.slice(colon + 1, end);
    }
    entries.push(`${type}:${value}`);
    i = end + 2;
  }
  return entries;
}
