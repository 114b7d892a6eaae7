import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { type ConcurrencyPolicy, concurrency, definePolicy, isFloodgateError, type Policy } from 'floodgate';
import { compilePolicy, settleRefusal } from 'floodgate/model';
import {
  type Alias,
  Composer,
  type CST,
  type Document,
  isAlias,
  isMap,
  isPair,
  isScalar,
  isSeq,
  Lexer,
  LineCounter,
  type Node,
  Parser,
  visit,
} from 'yaml';

/** The service's configuration, validated: domains of descriptor rules, each with its policies. */
export interface ServiceConfig {
  /** Namespace of every key the service writes in the store. @default 'floodgate' */
  readonly prefix: string;
  readonly domains: readonly DomainConfig[];
}

/** One domain: an independent tree of descriptor rules (Envoy's `domain`). */
export interface DomainConfig {
  readonly domain: string;
  /** Decide and count, but always answer OK (descriptors may override it). @default false */
  readonly shadow: boolean;
  readonly descriptors: readonly DescriptorConfig[];
  /**
   * `envoy` for a domain written in envoyproxy/ratelimit's format: wildcards anywhere in a value, tried in
   * the order written; its counting (every call counts) and its answers. @default 'floodgate'
   */
  readonly format?: 'floodgate' | 'envoy';
}

/**
 * A rule's `rate_limit` in envoyproxy/ratelimit's format, as written: how the rule is reported (`current_limit`)
 * and decided. `requestsPerUnit` 0 denies every call.
 */
export interface EnvoyLimitConfig {
  /** Unit name, lower case: `second` … `year`; undefined for an unlimited rule without a unit. */
  readonly unit: string | undefined;
  readonly requestsPerUnit: number;
  /** `rate_limit.name`: reported as `current_limit.name`, and what `replaces` refers to. */
  readonly name: string | undefined;
  /** Names of the limits this rule replaces when both apply to one request. */
  readonly replaces: readonly string[];
  /**
   * envoyproxy/ratelimit's `quota_mode`: this descriptor over its limit makes the answer OVER_LIMIT only
   * when every quota descriptor of the request is over (its own status still says OVER_LIMIT).
   */
  readonly quotaMode?: boolean;
}

/**
 * A rule matching one descriptor entry: `key`, and a `value` that is exact, a prefix ending in `*`, or
 * absent (any value). The policies of the rule reached by a descriptor's last entry apply to it.
 */
export interface DescriptorConfig {
  readonly key: string;
  /** Exact value, `prefix*`, or `undefined` for any value. */
  readonly value: string | undefined;
  /** All enforced together, all-or-nothing. Empty for a rule that only groups nested rules. */
  readonly policies: readonly Policy[];
  /**
   * At most this many calls in flight per descriptor value: permits taken with `/v1/permits/acquire` (or
   * by an Envoy request carrying a `floodgate_lease` entry) and given back by a release.
   */
  readonly concurrency?: ConcurrencyPolicy | undefined;
  /** Inherited from the enclosing rule or domain when not set. */
  readonly shadow: boolean | undefined;
  /** For `*`/prefix/any-value rules: every matching value shares one counter instead of one each. */
  readonly shared: boolean;
  /** Explicitly no limit for this rule (an allow-list entry). */
  readonly unlimited: boolean;
  readonly descriptors: readonly DescriptorConfig[];
  /** Line of the rule in its file (1-based), for messages. */
  readonly line: number;
  /** The file of the rule, when the config was read from several. */
  readonly file?: string | undefined;
  /**
   * envoyproxy/ratelimit's `metadata` (sent as dynamic metadata by that service): accepted and ignored,
   * with a warning when the config loads. True when the rule has it.
   */
  readonly metadata?: boolean;
  /** The rule's `rate_limit` in envoyproxy/ratelimit's format (domains of that format only). */
  readonly envoy?: EnvoyLimitConfig | undefined;
  /**
   * `charge_on_stream_done: true` (floodgate's format): a call that carries the descriptor's own cost
   * (Envoy's `apply_on_stream_done` call, its `hits_addend` the actual cost) is charged that cost
   * whatever the key's state, past the limit as a debt, and answered OK; a call without a cost of its
   * own (the request's) only checks, and is denied while the key is in debt. Meter policies only.
   */
  readonly chargeOnStreamDone?: boolean;
}

/** One problem in a config, located by path and line. */
export interface ConfigIssue {
  /** The file, when the config was read from several (else the error's `file`). */
  readonly file?: string | undefined;
  /** Where, as a path: `domains[0].descriptors[1].policies[0].limit`. */
  readonly path: string;
  /** 1-based line and column in the file; 0 when unknown. */
  readonly line: number;
  readonly column: number;
  readonly message: string;
}

/** A config that cannot be used; `issues` lists every problem found, each with its path and line. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly issues: readonly ConfigIssue[];
  readonly file: string | undefined;

  constructor(issues: readonly ConfigIssue[], file?: string) {
    const where = file ?? 'config';
    // A problem with no place in the text (the file cannot be read) is the file's alone: no `:0:0`.
    const at = (i: ConfigIssue) => {
      const file = i.file ?? where;
      return i.line > 0 ? `${file}:${i.line}:${i.column}` : `${file}:`;
    };
    const lines = issues.map((i) => `  ${at(i)} ${i.path ? `${i.path}: ` : ''}${i.message}`);
    const count = `${issues.length} problem${issues.length === 1 ? '' : 's'}${issues.length >= MAX_ISSUES ? ', checking stopped there' : ''}`;
    super(`invalid config (${count}):\n${lines.join('\n')}`);
    this.issues = issues;
    this.file = file;
  }
}

/** Most problems reported for one file: checking stops at the 50th. */
export const MAX_ISSUES = 50;
/** Deepest descriptor nesting accepted (Envoy descriptors rarely go past 4). */
export const MAX_DESCRIPTOR_DEPTH = 16;
/**
 * Largest config accepted, in bytes (2 MiB: some 29,000 rules written one key per line). The YAML parser
 * holds the whole document as a syntax tree and then a node tree, about 130 bytes of memory per byte of
 * text: 2 MiB peaks near 330 MB, while configs in use run to kilobytes.
 */
export const MAX_CONFIG_BYTES = 2 * 1024 * 1024;
/**
 * Most descriptor rules in one config, over all domains (about 2 kB of memory each once compiled).
 * Counted while checking, so an alias that repeats a long list of rules stops here, not when memory
 * runs out.
 */
export const MAX_RULES = 50_000;
/**
 * Deepest nesting of YAML collections (mappings and lists) accepted. A config needs 3 levels plus 2 per
 * descriptor level (37 at {@link MAX_DESCRIPTOR_DEPTH}); the YAML library composes nodes recursively,
 * so a deeper file is refused before it is composed.
 */
export const MAX_YAML_DEPTH = 64;
/**
 * Most nodes YAML aliases may expand to (the `maxAliasCount` of the YAML library): `*anchor` repeats a
 * node without repeating its text, so nested aliases grow exponentially ("billion laughs").
 */
export const MAX_YAML_ALIAS_COUNT = 1000;

const DOMAIN_PATTERN = /^[A-Za-z0-9_.:-]{1,128}$/;
const PREFIX_PATTERN = /^[A-Za-z0-9_.:-]{1,128}$/;
/**
 * Length of each Envoy rate-limit unit, for config rules and request overrides alike. A Map, not an object
 * literal: a unit from a config or a request such as `__proto__`, `constructor` or `toString` must not find
 * what an object inherits.
 */
export const ENVOY_UNITS: ReadonlyMap<string, number> = new Map([
  ['second', 1000],
  ['minute', 60_000],
  ['hour', 3_600_000],
  ['day', 86_400_000],
  ['week', 604_800_000],
  ['month', 2_592_000_000],
  ['year', 31_536_000_000],
]);

/** One step of a path in a config: a field name or a list index. */
export type Segment = string | number;

/** A path as messages show it: `domains[0].descriptors[1].key`. */
export function pathOf(segments: readonly Segment[]): string {
  let out = '';
  for (const s of segments) out += typeof s === 'number' ? `[${s}]` : out === '' ? s : `.${s}`;
  return out;
}

/**
 * The error of a config file or directory that cannot be read. The file is named once, before the reason:
 * Node's own message repeats it (`ENOENT: …, open 'x'`).
 */
export function unreadable(error: unknown, file: string): ConfigError {
  const code = (error as { code?: unknown }).code;
  const reason =
    typeof code === 'string' && code in READ_ERRORS
      ? `${READ_ERRORS[code as keyof typeof READ_ERRORS]} (${code})`
      : error instanceof Error
        ? error.message
        : String(error);
  return new ConfigError([{ path: '', line: 0, column: 0, message: `cannot read the file: ${reason}` }], file);
}

/** What a config file that cannot be read says, by the system's error code. */
const READ_ERRORS = {
  ENOENT: 'no such file',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  EISDIR: 'it is a directory',
  ENOTDIR: 'a part of the path is not a directory',
  ELOOP: 'too many symbolic links',
} as const;

/** Reads a config file; throws {@link ConfigError} naming the file, path and line of every problem. */
export function loadConfigFile(file: string): ServiceConfig {
  return parseConfig(readConfigFile(file), file);
}

/**
 * Reads a config file's text, refusing a file over {@link MAX_CONFIG_BYTES} before reading it; throws
 * {@link ConfigError}.
 */
export function readConfigFile(file: string): string {
  let fd: number | undefined;
  try {
    fd = openSync(file, 'r');
    const size = fstatSync(fd).size;
    if (size > MAX_CONFIG_BYTES) throw new ConfigError([tooLarge(`${size} bytes`)], file);
    // Read at most one byte past the bound: a file that grows while it is read is refused too.
    const buffer = Buffer.allocUnsafe(Math.min(size, MAX_CONFIG_BYTES) + 1);
    let length = 0;
    for (;;) {
      const n = readSync(fd, buffer, length, buffer.length - length, null);
      if (n === 0) break;
      length += n;
      if (length === buffer.length) break;
    }
    if (length > MAX_CONFIG_BYTES) throw new ConfigError([tooLarge(`over ${MAX_CONFIG_BYTES} bytes`)], file);
    return buffer.toString('utf8', 0, length);
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    throw unreadable(error, file);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

function tooLarge(size: string): ConfigIssue {
  return {
    path: '',
    line: 0,
    column: 0,
    message: `the config is ${size}; a config has at most ${MAX_CONFIG_BYTES} bytes (2 MiB)`,
  };
}

/**
 * Parses and validates a YAML config.
 *
 * @example
 * ```ts
 * const config = parseConfig(`
 * domains:
 *   - domain: api
 *     descriptors:
 *       - key: remote_address
 *         policies: [{ algorithm: gcra, name: per-ip, limit: 100, periodMs: 60000 }]
 * `);
 * ```
 */
export function parseConfig(text: string, file?: string): ServiceConfig {
  return checkFloodgateConfig(readYaml(text, file), file);
}

/** A config file's YAML, parsed within the bounds, with what a checker needs to locate its problems. */
export interface YamlDocument {
  readonly doc: Document.Parsed;
  /** The document as plain data. */
  readonly data: unknown;
  readonly locator: Locator;
  readonly sourceOf: SourceOf;
  /** 1-based line and column of an offset in the text. */
  readonly position: (offset: number) => { line: number; column: number };
}

/**
 * Parses a config's YAML within the bounds ({@link MAX_CONFIG_BYTES}, {@link MAX_YAML_DEPTH},
 * {@link MAX_YAML_ALIAS_COUNT}); throws {@link ConfigError} for text that is not one YAML document.
 * `version` 1.1 reads the YAML of Go's yaml.v2 (envoyproxy/ratelimit's files): `yes`, `on`, `y` are true.
 */
export function readYaml(text: string, file?: string, version: '1.1' | '1.2' = '1.2'): YamlDocument {
  // Characters never outnumber UTF-8 bytes: count bytes only when the characters are near the bound.
  if (text.length > MAX_CONFIG_BYTES / 3) {
    const bytes = Buffer.byteLength(text, 'utf8');
    if (bytes > MAX_CONFIG_BYTES) throw new ConfigError([tooLarge(`${bytes} bytes`)], file);
  }
  const lineCounter = new LineCounter();
  const doc = parseYaml(text, lineCounter, file, version);
  if (doc.errors.length > 0) {
    throw new ConfigError(
      doc.errors.slice(0, MAX_ISSUES).map((e) => {
        const pos = lineCounter.linePos(e.pos[0]);
        return { path: '', line: pos.line, column: pos.col, message: `YAML: ${e.message.split('\n')[0] ?? e.message}` };
      }),
      file,
    );
  }
  let data: unknown;
  try {
    data = doc.toJS({ maxAliasCount: MAX_YAML_ALIAS_COUNT });
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    const aliases = reason.startsWith('Excessive alias count');
    const first = aliases ? firstAlias(doc) : undefined;
    const pos = first === undefined ? { line: 1, col: 1 } : lineCounter.linePos(first);
    throw new ConfigError(
      [
        {
          path: '',
          line: pos.line,
          column: pos.col,
          message: aliases
            ? `YAML aliases (*name) expand to more than ${MAX_YAML_ALIAS_COUNT} nodes; share a policy among many rules with a named policy (top-level \`policies\`) instead`
            : `YAML: ${reason}`,
        },
      ],
      file,
    );
  }
  const aliasTargets = new AliasTargets(doc);
  return {
    doc,
    data,
    locator: (segments, onKey) => locate(doc.contents, segments, onKey, lineCounter),
    sourceOf: (segments) => scalarSource(doc, segments, aliasTargets),
    position: (offset) => {
      const pos = lineCounter.linePos(offset);
      return { line: pos.line, column: pos.col };
    },
  };
}

/** Validates a parsed config of floodgate's own format; throws {@link ConfigError}. */
export function checkFloodgateConfig(yaml: YamlDocument, file?: string): ServiceConfig {
  const checker = new Checker(yaml.locator, yaml.sourceOf);
  let config: ServiceConfig | undefined;
  try {
    config = checker.config(yaml.data);
  } catch (error) {
    if (error !== STOP) throw error;
  }
  if (checker.issues.length > 0) throw new ConfigError(checker.issues, file);
  return config as ServiceConfig;
}

/**
 * Parses YAML into a document as the library's `parseDocument` does, with the nesting depth bounded
 * while the syntax tree is built: the parser keeps every open collection on its stack (it does not
 * recurse), and works harder per token the deeper it is, while composing nodes recurses once per level
 * and runs out of stack thousands of levels down. So the stack is watched token by token.
 */
function parseYaml(
  text: string,
  lineCounter: LineCounter,
  file: string | undefined,
  version: '1.1' | '1.2',
): Document.Parsed {
  const parser = new Parser(lineCounter.addNewLine);
  lineCounter.addNewLine(0);
  const tokens: CST.Token[] = [];
  for (const lexeme of new Lexer().lex(text)) {
    for (const token of parser.next(lexeme)) tokens.push(token);
    if (parser.stack.length > MAX_YAML_DEPTH && collectionDepth(parser.stack) > MAX_YAML_DEPTH) {
      const pos = lineCounter.linePos(parser.offset);
      throw new ConfigError(
        [
          {
            path: '',
            line: pos.line,
            column: pos.col,
            message: `YAML nests mappings and lists more than ${MAX_YAML_DEPTH} levels deep (the most a config accepts)`,
          },
        ],
        file,
      );
    }
  }
  for (const token of parser.end()) tokens.push(token);
  const composer = new Composer({ uniqueKeys: true, version });
  let doc: Document.Parsed | undefined;
  for (const d of composer.compose(tokens, true, text.length)) {
    if (doc === undefined) doc = d;
    else {
      const pos = lineCounter.linePos(d.range[0]);
      throw new ConfigError(
        [{ path: '', line: pos.line, column: pos.col, message: 'YAML: a config is one document; remove `---`' }],
        file,
      );
    }
  }
  return doc as Document.Parsed;
}

/** How many collections the parser has open. */
function collectionDepth(stack: readonly CST.Token[]): number {
  let depth = 0;
  for (const token of stack) {
    if (token.type === 'block-map' || token.type === 'block-seq' || token.type === 'flow-collection') depth++;
  }
  return depth;
}

/** The offset of the document's first alias, to point at when aliases expand too far. */
function firstAlias(doc: Document): number | undefined {
  let offset: number | undefined;
  visit(doc, {
    Alias(_key, node) {
      offset = node.range?.[0];
      return visit.BREAK;
    },
  });
  return offset;
}

/**
 * The node each alias of a document stands for, found in one pass: the library's `Alias.resolve`
 * searches the whole document on every call, which a config of many aliased rules would repeat once
 * per rule. Built on first use.
 */
class AliasTargets {
  private targets: Map<Alias, Node> | undefined;

  constructor(private readonly doc: Document) {}

  /** The node an alias stands for, or the node itself when it is not an alias. */
  resolve(node: unknown): unknown {
    if (!isAlias(node)) return node;
    if (this.targets === undefined) {
      const targets = new Map<Alias, Node>();
      const anchors = new Map<string, Node>();
      // Visited in document order: an alias stands for the last node with its anchor before it.
      visit(this.doc, {
        Node(_key, n) {
          if (isAlias(n)) {
            const target = anchors.get(n.source);
            if (target !== undefined) targets.set(n, target);
          } else if (n.anchor !== undefined) {
            anchors.set(n.anchor, n);
          }
        },
      });
      this.targets = targets;
    }
    return this.targets.get(node);
  }
}

/** Finds the line of a path in the YAML tree: the deepest node that exists on the way. */
function locate(
  root: Node | null,
  segments: readonly Segment[],
  onKey: boolean,
  lineCounter: LineCounter,
): { line: number; column: number } {
  let node: unknown = root;
  let offset = root?.range?.[0] ?? 0;
  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i] as Segment;
    let next: unknown;
    let keyNode: unknown;
    if (isMap(node)) {
      const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && String(p.key.value) === String(segment));
      next = pair?.value;
      keyNode = pair?.key;
    } else if (isSeq(node) && typeof segment === 'number') {
      next = node.items[segment];
    }
    const last = i === segments.length - 1;
    const target = last && onKey && keyNode !== undefined ? keyNode : (next ?? keyNode);
    const range = (target as Node | undefined)?.range;
    if (range === undefined || range === null) break;
    offset = range[0];
    node = next;
  }
  const pos = lineCounter.linePos(offset);
  return { line: pos.line, column: pos.col };
}

/**
 * The source text of the scalar at a path, as written in the file (`007`, `1.10`, `true`), or undefined
 * when the path does not lead to a scalar of the file (a merge key `<<` built it).
 */
function scalarSource(doc: Document, segments: readonly Segment[], aliases: AliasTargets): string | undefined {
  let node: unknown = doc.contents;
  for (const segment of segments) {
    node = aliases.resolve(node);
    if (isMap(node)) {
      const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && String(p.key.value) === String(segment));
      node = pair?.value;
    } else if (isSeq(node) && typeof segment === 'number') {
      node = node.items[segment];
    } else {
      return undefined;
    }
  }
  node = aliases.resolve(node);
  return isScalar(node) && typeof node.source === 'string' ? node.source : undefined;
}

/** Thrown inside a checker to stop early (too many problems or rules); never escapes a parse function. */
export const STOP: unique symbol = Symbol('stop checking');

/** Finds the line and column of a path in the file (of its key, with `onKey`). */
export type Locator = (segments: readonly Segment[], onKey: boolean) => { line: number; column: number };
/** The scalar at a path as written in the file, when it is one. */
export type SourceOf = (segments: readonly Segment[]) => string | undefined;
/** A YAML mapping as plain data. */
export type Data = Record<string, unknown>;

/**
 * What every config checker does: walks parsed data and records every problem with its path, line and
 * column (stopping at the {@link MAX_ISSUES}th), reading scalars as the text written in the file.
 */
export class YamlChecker {
  readonly issues: ConfigIssue[] = [];

  constructor(
    protected readonly locator: Locator,
    protected readonly sourceOf: SourceOf,
  ) {}

  /**
   * A scalar as text. YAML resolves a plain `007`, `1.10`, `0x1F` or `true` to a number or boolean whose
   * string differs (`7`, `1.1`, `31`), while Envoy sends the text as written: the scalar's source text
   * stands. `null` (with an issue) when the source is not known, or when the field is neither text, a
   * number nor a boolean.
   */
  protected text(data: unknown, segments: Segment[], what: string): string | null {
    if (typeof data === 'string') return data;
    if (typeof data === 'number' || typeof data === 'boolean') {
      const source = this.sourceOf(segments);
      if (source !== undefined) return source;
      this.issue(segments, `${what} is read as the ${typeof data} ${String(data)}: quote it ("…") to keep the text`);
      return null;
    }
    this.issue(segments, `${what} must be a string`);
    return null;
  }

  /** Records a problem; at the {@link MAX_ISSUES}th, stops checking (the rest is not looked at). */
  issue(segments: readonly Segment[], message: string, onKey = false): void {
    const { line, column } = this.locator(segments, onKey);
    this.issues.push({ path: pathOf(segments), line, column, message });
    if (this.issues.length >= MAX_ISSUES) throw STOP;
  }

  protected object(data: unknown, path: Segment[]): Data | undefined {
    if (typeof data !== 'object' || data === null || Array.isArray(data)) {
      this.issue(path, `must be a mapping (key: value), got ${describe(data)}`);
      return undefined;
    }
    return data as Data;
  }

  protected list(o: Data, field: string, path: Segment[], required: boolean): unknown[] | undefined {
    const value = o[field];
    if (value === undefined || value === null) {
      if (required) this.issue(path, `\`${field}\` is required`);
      return undefined;
    }
    if (!Array.isArray(value)) {
      this.issue([...path, field], `must be a list, got ${describe(value)}`);
      return undefined;
    }
    return value;
  }

  protected flag(o: Data, field: string, path: Segment[]): boolean | undefined {
    const value = o[field];
    if (value === undefined) return undefined;
    if (typeof value !== 'boolean') {
      this.issue([...path, field], `must be true or false, got ${describe(value)}`);
      return undefined;
    }
    return value;
  }

  protected known(o: Data, path: Segment[], fields: readonly string[]): void {
    for (const field of Object.keys(o)) {
      if (!fields.includes(field)) {
        this.issue([...path, field], `unknown field \`${field}\` (expected one of: ${fields.join(', ')})`, true);
      }
    }
  }
}

/**
 * Option names of the library as the config spells them (Envoy's `rate_limit` block). Maps: a field name
 * comes from the file, and an object would answer `__proto__` with what it inherits.
 */
const NO_RENAMES: ReadonlyMap<string, string> = new Map();
const ENVOY_RENAMES: ReadonlyMap<string, string> = new Map([['limit', 'requests_per_unit']]);

/** Walks the parsed data of floodgate's own format, collecting every problem with its location. */
/**
 * The rule checker both config formats share (floodgate's and envoyproxy/ratelimit's): the nested list of
 * descriptor rules, their depth, their number and their duplicates. Each format reads one rule its own way
 * (`descriptor`) and words a duplicate its own way (`duplicate`).
 */
export abstract class RuleChecker extends YamlChecker {
  /** Descriptor rules seen so far, aliased ones as often as they are used. */
  private rules = 0;

  /** Reads one rule at `path`, `depth` levels down; undefined when it has a problem (reported). */
  protected abstract descriptor(data: unknown, path: Segment[], depth: number): DescriptorConfig | undefined;

  /** The problem of a rule whose key and value the rule at `first` already has. */
  protected abstract duplicate(d: DescriptorConfig, first: string): string;

  /** Counts a rule; past {@link MAX_RULES} the check stops. */
  protected countRule(path: Segment[]): void {
    if (++this.rules > MAX_RULES) {
      this.issue(path, `a config has at most ${MAX_RULES} descriptor rules (aliases count each time they are used)`);
      throw STOP;
    }
  }

  /** The rules under `o.descriptors`, at most {@link MAX_DESCRIPTOR_DEPTH} levels deep, each key and value once. */
  protected descriptors(o: Data, path: Segment[], depth: number): DescriptorConfig[] {
    const list = this.list(o, 'descriptors', path, false);
    if (list === undefined) return [];
    if (depth > MAX_DESCRIPTOR_DEPTH) {
      this.issue([...path, 'descriptors'], `descriptors nest at most ${MAX_DESCRIPTOR_DEPTH} levels deep`);
      return [];
    }
    const out: DescriptorConfig[] = [];
    const seen = new Map<string, number>();
    list.forEach((item, i) => {
      const at = [...path, 'descriptors', i];
      const d = this.descriptor(item, at, depth);
      if (d === undefined) return;
      const id = `${d.key}\0${d.value ?? '\0any'}`;
      const first = seen.get(id);
      if (first !== undefined) {
        this.issue(at, this.duplicate(d, pathOf([...path, 'descriptors', first])));
        return;
      }
      seen.set(id, i);
      out.push(d);
    });
    return out;
  }
}

class Checker extends RuleChecker {
  private readonly named = new Map<string, Policy>();
  /** Named policies defined with a problem (reported there): a reference to one adds no second problem. */
  private readonly invalidNamed = new Set<string>();
  /** Algorithm of every policy name used: one name is one stored state, so it keeps one algorithm. */
  private readonly algorithms = new Map<string, { algorithm: string; path: string }>();

  config(data: unknown): ServiceConfig | undefined {
    if (data === null || data === undefined) {
      this.issue([], 'the config is empty: it needs at least `domains`');
      return undefined;
    }
    const root = this.object(data, []);
    if (root === undefined) return undefined;
    this.known(root, [], ['version', 'prefix', 'shadow', 'policies', 'domains']);
    if (root.version !== undefined && root.version !== 1) this.issue(['version'], 'must be 1 (or left out)');
    let prefix = 'floodgate';
    if (root.prefix !== undefined) {
      if (typeof root.prefix === 'string' && PREFIX_PATTERN.test(root.prefix)) prefix = root.prefix;
      else this.issue(['prefix'], 'must be 1 to 128 characters of A-Z a-z 0-9 _ . : -');
    }
    const shadow = this.flag(root, 'shadow', []) ?? false;
    if (root.policies !== undefined) this.namedPolicies(root.policies);
    const domains: DomainConfig[] = [];
    const list = this.list(root, 'domains', [], true);
    const seen = new Map<string, number>();
    list?.forEach((item, i) => {
      const domain = this.domain(item, ['domains', i], shadow);
      if (domain === undefined) return;
      const first = seen.get(domain.domain);
      if (first !== undefined) {
        this.issue(
          ['domains', i, 'domain'],
          `domain ${JSON.stringify(domain.domain)} is already defined at domains[${first}]`,
        );
      } else {
        seen.set(domain.domain, i);
        domains.push(domain);
      }
    });
    return { prefix, domains };
  }

  private namedPolicies(data: unknown): void {
    const map = this.object(data, ['policies']);
    if (map === undefined) return;
    for (const [name, body] of Object.entries(map)) {
      const path = ['policies', name];
      if (typeof body === 'object' && body !== null && !Array.isArray(body)) {
        const given = (body as Data).name;
        if (given !== undefined && given !== name) {
          this.issue(
            [...path, 'name'],
            `the name of a named policy is its key (${JSON.stringify(name)}); leave \`name\` out`,
          );
          this.invalidNamed.add(name);
          continue;
        }
      }
      const policy = this.policy(typeof body === 'object' && body !== null ? { ...body, name } : body, path);
      if (policy !== undefined) this.named.set(name, policy);
      else this.invalidNamed.add(name);
    }
  }

  private domain(data: unknown, path: Segment[], inherited: boolean): DomainConfig | undefined {
    const o = this.object(data, path);
    if (o === undefined) return undefined;
    this.known(o, path, ['domain', 'shadow', 'descriptors']);
    const name = o.domain;
    if (typeof name !== 'string' || !DOMAIN_PATTERN.test(name)) {
      this.issue(
        name === undefined ? path : [...path, 'domain'],
        name === undefined
          ? 'a domain needs `domain`, its name'
          : '`domain` must be 1 to 128 characters of A-Z a-z 0-9 _ . : -',
      );
      return undefined;
    }
    const shadow = this.flag(o, 'shadow', path) ?? inherited;
    const descriptors = this.descriptors(o, path, 1);
    return { domain: name, shadow, descriptors };
  }

  protected override duplicate(d: DescriptorConfig, first: string): string {
    return `a rule for key ${JSON.stringify(d.key)}${d.value === undefined ? ' (any value)' : ` and value ${JSON.stringify(d.value)}`} is already defined at ${first}`;
  }

  protected override descriptor(data: unknown, path: Segment[], depth: number): DescriptorConfig | undefined {
    this.countRule(path);
    const o = this.object(data, path);
    if (o === undefined) return undefined;
    this.known(o, path, [
      'key',
      'value',
      'policies',
      'concurrency',
      'rate_limit',
      'shadow',
      'shared',
      'unlimited',
      'charge_on_stream_done',
      'descriptors',
    ]);
    if (o.key === undefined || o.key === null) {
      this.issue(path, 'a descriptor rule needs `key`, a non-empty string');
      return undefined;
    }
    const key = this.text(o.key, [...path, 'key'], '`key`');
    if (key === null) return undefined;
    if (key.length === 0 || key.length > 1024) {
      this.issue([...path, 'key'], 'a descriptor rule needs `key`, a non-empty string of at most 1024 characters');
      return undefined;
    }
    let value: string | undefined;
    if (o.value !== undefined && o.value !== null) {
      // Descriptor values are text on the wire: `value: 007` is "007", never the number 7.
      const text = this.text(o.value, [...path, 'value'], '`value` (an exact value, or a prefix ending in `*`)');
      if (text === '*') value = undefined;
      else if (text === null) value = undefined;
      else {
        value = text;
        if (value.length === 0 || value.length > 1024) this.issue([...path, 'value'], 'must be 1 to 1024 characters');
        else if (value.indexOf('*') !== -1 && value.indexOf('*') !== value.length - 1) {
          this.issue([...path, 'value'], 'a wildcard `*` may only end the value (`/api/*`)');
        }
      }
    }
    const shadow = this.flag(o, 'shadow', path);
    const shared = this.flag(o, 'shared', path) ?? false;
    if (shared && value !== undefined && !value.endsWith('*')) {
      this.issue([...path, 'shared'], 'only a rule with a wildcard (or no) value can share one counter across values');
    }
    const unlimited = this.flag(o, 'unlimited', path) ?? false;
    const policies: Policy[] = [];
    const list = this.list(o, 'policies', path, false);
    list?.forEach((item, i) => {
      const p = this.policyRef(item, [...path, 'policies', i]);
      if (p !== undefined) policies.push(p);
    });
    if (o.rate_limit !== undefined) {
      const p = this.envoyRateLimit(o.rate_limit, [...path, 'rate_limit']);
      if (p !== undefined) policies.push(p);
    }
    const names = new Set<string>();
    for (const p of policies) {
      if (names.has(p.name))
        this.issue([...path, 'policies'], `two policies of this rule are named ${JSON.stringify(p.name)}`);
      names.add(p.name);
    }
    if (policies.length > 32) this.issue([...path, 'policies'], 'at most 32 policies per rule');
    if (unlimited && policies.length > 0) {
      this.issue([...path, 'unlimited'], 'an unlimited rule cannot also have policies');
    }
    const chargeOnStreamDone = this.flag(o, 'charge_on_stream_done', path) ?? false;
    if (chargeOnStreamDone) this.streamDonePolicies(policies, [...path, 'charge_on_stream_done']);
    const limit = o.concurrency === undefined ? undefined : this.concurrency(o.concurrency, [...path, 'concurrency']);
    if (limit !== undefined && unlimited) {
      this.issue([...path, 'unlimited'], 'an unlimited rule cannot also have a concurrency limit');
    }
    if (limit !== undefined && policies.some((p) => p.name === limit.name)) {
      this.issue([...path, 'concurrency', 'name'], `a policy of this rule is named ${JSON.stringify(limit.name)} too`);
    }
    const descriptors = this.descriptors(o, path, depth + 1);
    const { line } = this.locator(path, false);
    return {
      key,
      value,
      policies,
      ...(limit === undefined ? {} : { concurrency: limit }),
      shadow,
      shared,
      unlimited,
      descriptors,
      line,
      ...(chargeOnStreamDone ? { chargeOnStreamDone } : {}),
    };
  }

  /** `concurrency: { limit, leaseMs, maxQueue?, name? }`: the library's concurrency policy, its errors as issues. */
  private concurrency(data: unknown, path: Segment[]): ConcurrencyPolicy | undefined {
    const o = this.object(data, path);
    if (o === undefined) return undefined;
    try {
      return concurrency(o as never);
    } catch (error) {
      if (!isFloodgateError(error)) throw error;
      const option = error.option;
      const known = option === 'limit' || option === 'leaseMs' || option === 'maxQueue' || option === 'name';
      this.issue(
        known || error.unknownOption === true ? [...path, option as string] : path,
        error.problem,
        error.unknownOption,
      );
      return undefined;
    }
  }

  /** A rule charged at stream end needs policies, each a meter that can carry a debt. */
  private streamDonePolicies(policies: readonly Policy[], path: Segment[]): void {
    if (policies.length === 0) {
      this.issue(
        path,
        'a rule charged at stream end needs policies (meters: gcra, a continuous tokenBucket, a leakyBucket)',
      );
      return;
    }
    for (const p of policies) {
      const reason = settleRefusal(compilePolicy(p));
      if (reason !== undefined)
        this.issue(path, `cannot charge past the limit under policy ${JSON.stringify(p.name)}: ${reason}`);
    }
  }

  private policyRef(data: unknown, path: Segment[]): Policy | undefined {
    if (typeof data === 'string') {
      const policy = this.named.get(data);
      if (policy === undefined && !this.invalidNamed.has(data)) {
        const known = [...this.named.keys(), ...this.invalidNamed];
        this.issue(
          path,
          `no named policy ${JSON.stringify(data)} (${known.length === 0 ? 'define it under top-level `policies`' : `named policies: ${known.join(', ')}`})`,
        );
      }
      return policy;
    }
    return this.policy(data, path);
  }

  /** Envoy's `rate_limit: { unit, requests_per_unit }`, read as a fixed window aligned to the clock. */
  private envoyRateLimit(data: unknown, path: Segment[]): Policy | undefined {
    const o = this.object(data, path);
    if (o === undefined) return undefined;
    this.known(o, path, ['unit', 'requests_per_unit', 'name']);
    const unit = typeof o.unit === 'string' ? ENVOY_UNITS.get(o.unit.toLowerCase()) : undefined;
    if (unit === undefined) {
      this.issue(
        [...path, 'unit'],
        `must be one of ${[...ENVOY_UNITS.keys()].join(', ')}, got ${o.unit === undefined ? 'nothing' : describe(o.unit)}`,
      );
      return undefined;
    }
    const input: Data = { algorithm: 'fixed-window', limit: o.requests_per_unit, windowMs: unit };
    if (o.name !== undefined) input.name = o.name;
    return this.policy(input, path, ENVOY_RENAMES);
  }

  private policy(data: unknown, path: Segment[], rename: ReadonlyMap<string, string> = NO_RENAMES): Policy | undefined {
    const label = pathOf(path);
    let policy: Policy;
    try {
      policy = definePolicy(data, label);
    } catch (error) {
      if (!isFloodgateError(error)) throw error;
      let segments: Segment[] = path;
      const option = error.option;
      if (option?.startsWith(`${label}.`)) {
        const field = option.slice(label.length + 1);
        segments = [...path, rename.get(field) ?? field];
      }
      // The issue carries the option's path already: only what is wrong with it, in the config's names.
      let message = error.problem;
      for (const [from, to] of rename) message = message.replaceAll(`.${from}`, `.${to}`);
      this.issue(segments, message, error.unknownOption);
      return undefined;
    }
    const seen = this.algorithms.get(policy.name);
    if (seen !== undefined && seen.algorithm !== policy.algorithm && seen.path !== label) {
      this.issue(
        path,
        `policy name ${JSON.stringify(policy.name)} is used by a ${seen.algorithm} policy at ${seen.path}; a name identifies stored state, so it keeps one algorithm`,
      );
    } else if (seen === undefined) {
      this.algorithms.set(policy.name, { algorithm: policy.algorithm, path: label });
    }
    return policy;
  }
}

/** A value as a message shows it, cut to 40 characters. */
export function describe(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  return String(value);
}
