import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A key pair's files. */
export interface Pair {
  cert: string;
  key: string;
}

/**
 * Throwaway certificates made with `openssl` for the TLS tests: a CA with a server certificate (two, to
 * test a reload), client certificates (one with Envoy's names, one with others), and a second CA with a
 * client certificate of its own. EC P-256 keys, valid for a day.
 */
export interface TestPki {
  readonly dir: string;
  readonly ca: Pair;
  /** For `localhost` and 127.0.0.1. */
  readonly server: Pair;
  /** Another certificate for the same names, from the same CA. */
  readonly server2: Pair;
  /** SAN `DNS:envoy.test`, `URI:spiffe://floodgate.test/envoy`. */
  readonly client: Pair;
  /** Same CA, SAN `DNS:intruder.test`. */
  readonly intruder: Pair;
  readonly otherCa: Pair;
  /** From the other CA, with Envoy's names. */
  readonly otherClient: Pair;
  /** A file's bytes. */
  read(file: string): Buffer;
  /** The SHA-256 fingerprint of a certificate file, as Node prints it. */
  fingerprint(file: string): string;
  remove(): void;
}

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** Makes the certificates in a new temporary directory. */
export function makePki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-tls-'));
  const path = (name: string) => join(dir, name);
  const ca = (name: string): Pair => {
    const pair = { cert: path(`${name}.pem`), key: path(`${name}.key`) };
    openssl([
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      pair.key,
      '-out',
      pair.cert,
      '-days',
      '1',
      '-subj',
      `/CN=${name}`,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ]);
    return pair;
  };
  const issue = (name: string, issuer: Pair, san: string, usage: 'serverAuth' | 'clientAuth'): Pair => {
    const pair = { cert: path(`${name}.pem`), key: path(`${name}.key`) };
    const csr = path(`${name}.csr`);
    const ext = path(`${name}.ext`);
    writeFileSync(
      ext,
      `basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=${usage}\nsubjectAltName=${san}\n`,
    );
    openssl([
      'req',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      pair.key,
      '-out',
      csr,
      '-subj',
      `/CN=${name}`,
    ]);
    openssl([
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      issuer.cert,
      '-CAkey',
      issuer.key,
      '-set_serial',
      String(Math.floor(Math.random() * 2 ** 40)),
      '-days',
      '1',
      '-extfile',
      ext,
      '-out',
      pair.cert,
    ]);
    return pair;
  };
  const root = ca('test-ca');
  const otherCa = ca('other-ca');
  const envoyNames = 'DNS:envoy.test,URI:spiffe://floodgate.test/envoy';
  return {
    dir,
    ca: root,
    server: issue('server', root, 'DNS:localhost,IP:127.0.0.1', 'serverAuth'),
    server2: issue('server2', root, 'DNS:localhost,IP:127.0.0.1', 'serverAuth'),
    client: issue('client', root, envoyNames, 'clientAuth'),
    intruder: issue('intruder', root, 'DNS:intruder.test', 'clientAuth'),
    otherCa,
    otherClient: issue('other-client', otherCa, envoyNames, 'clientAuth'),
    read: (file) => readFileSync(file),
    fingerprint: (file) => new X509Certificate(readFileSync(file)).fingerprint256,
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
