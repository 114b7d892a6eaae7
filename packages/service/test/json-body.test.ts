import { describe, expect, it } from 'vitest';
import { JsonBodyError, MAX_JSON_DEPTH, parseJsonBody } from '../src/json-body.js';

function refusal(text: string, maxDepth?: number): { message: string; field: string | undefined } {
  try {
    parseJsonBody(text, maxDepth);
  } catch (error) {
    if (error instanceof JsonBodyError) return { message: error.message, field: error.field };
    throw error;
  }
  throw new Error('expected the body to be refused');
}

describe('parseJsonBody', () => {
  it('parses what JSON.parse parses, when nesting and keys are in bounds', () => {
    const text = '{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"cost":2}],"cost":1}';
    expect(parseJsonBody(text)).toEqual(JSON.parse(text));
  });

  it('does not count brackets, braces, commas or escaped quotes inside strings', () => {
    const value = `${'['.repeat(100)}{\\"a\\":1,\\"a\\":2}${'}'.repeat(100)}`;
    const text = `{"domain":"${value}","descriptors":[{"entries":[{"key":"k\\\\","value":"v"}]}]}`;
    expect(parseJsonBody(text, 5)).toEqual(JSON.parse(text));
  });

  it('allows the same key in different objects, and a value equal to a key', () => {
    const text = '{"a":{"a":1,"b":"a"},"b":[{"a":1},{"a":2}]}';
    expect(parseJsonBody(text)).toEqual(JSON.parse(text));
  });

  it('refuses a key given twice, however it is escaped, naming its path', () => {
    expect(refusal('{"a":1,"a":2}')).toEqual({ message: 'a is given twice; each field may appear once', field: 'a' });
    expect(refusal('{"descriptors":[{"entries":[]},{"entries":[],"\\u0065ntries":[]}]}').field).toBe(
      'descriptors[1].entries',
    );
  });

  it('refuses nesting past the bound, naming where the next level would open', () => {
    expect(MAX_JSON_DEPTH).toBe(32);
    expect(refusal('{"a":[[1]]}', 2)).toEqual({
      message: 'the body nests arrays and objects deeper than 2 levels (at character 6, in a[0])',
      field: 'a[0]',
    });
    expect(parseJsonBody('{"a":[1]}', 2)).toEqual({ a: [1] });
  });

  it('reports a syntax error before a duplicate key', () => {
    expect(refusal('{"a":1,"a":2').message).toMatch(/^the body is not valid JSON: /);
  });
});
