/** Deepest nesting of arrays and objects accepted in a JSON request body (a decision request needs 5). */
export const MAX_JSON_DEPTH = 32;

/** A JSON body refused before its fields are read: why, and where (`descriptors[0].entries[1].key`). */
export class JsonBodyError extends Error {
  override readonly name = 'JsonBodyError';
  constructor(
    message: string,
    /** The field at fault, when the problem has one. */
    readonly field?: string,
  ) {
    super(message);
  }
}

interface Frame {
  readonly object: boolean;
  /** Keys seen so far in this object. */
  readonly keys: Set<string> | undefined;
  /** The current key (objects) or index (arrays): where a nested value sits. */
  key: string;
  index: number;
  expectKey: boolean;
}

/**
 * Parses a JSON request body, refusing what `JSON.parse` would take but a decision must not:
 *
 * - nesting deeper than {@link MAX_JSON_DEPTH}: a megabyte of `[` costs `JSON.parse` hundreds of
 *   milliseconds (a flat megabyte a few), so depth is counted first, in one pass over the text;
 * - a key given twice in one object: `JSON.parse` keeps the last, a proxy in front may read the first,
 *   and the two would then disagree about what was asked.
 *
 * `__proto__` needs nothing here: `JSON.parse` makes it an own property, and the fields are checked by
 * name afterwards. Throws {@link JsonBodyError}.
 */
export function parseJsonBody(text: string, maxDepth = MAX_JSON_DEPTH): unknown {
  const stack: Frame[] = [];
  let duplicate: string | undefined;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      let j = i + 1;
      let escaped = false;
      while (j < n) {
        const d = text.charCodeAt(j);
        if (d === 0x5c /* \ */) {
          escaped = true;
          j += 2;
          continue;
        }
        if (d === 0x22) break;
        j++;
      }
      const top = stack[stack.length - 1];
      if (top?.object === true && top.expectKey) {
        const raw = text.slice(i + 1, j);
        const key = escaped ? decodeKey(raw) : raw;
        if (duplicate === undefined && top.keys?.has(key)) {
          const base = containerPath(stack);
          duplicate = base === '' ? shortKey(key) : `${base}.${shortKey(key)}`;
        }
        top.keys?.add(key);
        top.key = key;
        top.expectKey = false;
      }
      i = j;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (stack.length >= maxDepth) {
        const where = step(containerPath(stack), stack[stack.length - 1] as Frame);
        throw new JsonBodyError(
          `the body nests arrays and objects deeper than ${maxDepth} levels (at character ${i}, in ${where})`,
          where,
        );
      }
      const object = c === 0x7b;
      stack.push({ object, keys: object ? new Set() : undefined, key: '', index: 0, expectKey: object });
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top !== undefined) {
        if (top.object) top.expectKey = true;
        else top.index++;
      }
    }
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new JsonBodyError(`the body is not valid JSON: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (duplicate !== undefined) {
    throw new JsonBodyError(`${duplicate} is given twice; each field may appear once`, duplicate);
  }
  return body;
}

/** A key written with escapes (`"dom\u0061in"`), as JSON reads it; the raw text when it is malformed. */
function decodeKey(raw: string): string {
  try {
    return JSON.parse(`"${raw}"`) as string;
  } catch {
    return raw;
  }
}

/** The path of the innermost container: each outer frame's current key or index leads to the next. */
function containerPath(stack: readonly Frame[]): string {
  let out = '';
  for (let k = 0; k < stack.length - 1; k++) out = step(out, stack[k] as Frame);
  return out;
}

function step(out: string, frame: Frame): string {
  if (frame.object) {
    const key = shortKey(frame.key);
    return out === '' ? key : `${out}.${key}`;
  }
  return `${out}[${frame.index}]`;
}

/** A key as a path shows it: cut to 64 characters, so a message never grows with what a client sent. */
function shortKey(key: string): string {
  return key.length > 64 ? `${key.slice(0, 64)}…` : key;
}
