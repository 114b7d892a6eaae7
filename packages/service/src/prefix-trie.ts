/** A node of a {@link PrefixTrie}: the edge into it (`label`), its value when a key ends here, its children by first code unit. */
interface Node<T> {
  label: string;
  value: T | undefined;
  /** A key ends at this node (its value may be `undefined` only if `T` allows it). */
  ends: boolean;
  /** Children by the first code unit of their label: a few in an array (faster to scan), many in a map. */
  children: Children<T> | undefined;
}

type Children<T> = { codes: number[]; nodes: Node<T>[]; map: Map<number, Node<T>> | undefined };

/** Children kept in arrays up to this many; a map beyond. */
const SCAN = 8;

function childOf<T>(children: Children<T> | undefined, code: number): Node<T> | undefined {
  if (children === undefined) return undefined;
  if (children.map !== undefined) return children.map.get(code);
  const codes = children.codes;
  for (let i = 0; i < codes.length; i++) if (codes[i] === code) return children.nodes[i];
  return undefined;
}

function setChild<T>(children: Children<T>, code: number, node: Node<T>): void {
  if (children.map !== undefined) {
    children.map.set(code, node);
    return;
  }
  const i = children.codes.indexOf(code);
  if (i >= 0) children.nodes[i] = node;
  else {
    children.codes.push(code);
    children.nodes.push(node);
    if (children.codes.length > SCAN)
      children.map = new Map(children.codes.map((c, j) => [c, children.nodes[j] as Node<T>]));
  }
}

function newChildren<T>(): Children<T> {
  return { codes: [], nodes: [], map: undefined };
}

/** The length of the common start of `label` and `key` from `at`. */
function common(label: string, key: string, at: number): number {
  let n = 0;
  while (n < label.length && at + n < key.length && label.charCodeAt(n) === key.charCodeAt(at + n)) n++;
  return n;
}

/**
 * A compressed (radix) trie of string keys. Walking a value visits each of its prefixes that is a key in
 * one pass: the work is linear in the value's length, whatever the number of keys or of distinct key
 * lengths (a map looked up once per distinct length would slice the value once per length: with 1,000
 * lengths and values of 990 characters, a million characters copied per value). Nodes: at most twice the
 * number of keys; each edge holds a slice of a key.
 */
export class PrefixTrie<T> {
  private readonly root: Node<T> = { label: '', value: undefined, ends: false, children: undefined };

  /** The value of `key` itself, if it is a key. */
  get(key: string): T | undefined {
    const node = this.find(key);
    return node?.ends ? node.value : undefined;
  }

  has(key: string): boolean {
    return this.find(key)?.ends === true;
  }

  /** Sets the value of `key` (replacing any). */
  set(key: string, value: T): void {
    let node = this.root;
    let at = 0;
    for (;;) {
      if (at === key.length) {
        node.value = value;
        node.ends = true;
        return;
      }
      node.children ??= newChildren();
      const code = key.charCodeAt(at);
      const child = childOf(node.children, code);
      if (child === undefined) {
        setChild(node.children, code, { label: key.slice(at), value, ends: true, children: undefined });
        return;
      }
      const n = common(child.label, key, at);
      if (n < child.label.length) {
        // Split the edge where the key leaves it.
        const middle: Node<T> = {
          label: child.label.slice(0, n),
          value: undefined,
          ends: false,
          children: newChildren(),
        };
        setChild(middle.children as Children<T>, child.label.charCodeAt(n), child);
        child.label = child.label.slice(n);
        setChild(node.children, code, middle);
        node = middle;
      } else {
        node = child;
      }
      at += n;
    }
  }

  /** Calls `visit` with the value of every key that is a prefix of `value` (`value` itself included), shortest first. */
  prefixesOf(value: string, visit: (found: T) => void): void {
    let node = this.root;
    let at = 0;
    const length = value.length;
    for (;;) {
      if (node.ends) visit(node.value as T);
      const children = node.children;
      if (at >= length || children === undefined) return;
      // childOf, inlined: this loop runs once per character of the value.
      const code = value.charCodeAt(at);
      let child: Node<T> | undefined;
      if (children.map !== undefined) child = children.map.get(code);
      else {
        const codes = children.codes;
        for (let i = 0; i < codes.length; i++) {
          if (codes[i] === code) {
            child = children.nodes[i];
            break;
          }
        }
      }
      if (child === undefined) return;
      const label = child.label;
      if (label.length > 1 && !value.startsWith(label, at)) return;
      at += label.length;
      node = child;
    }
  }

  /** The value of the longest key that is a prefix of `value`. */
  longest(value: string): T | undefined {
    // prefixesOf's walk, keeping the last key met instead of calling back at each (a chain of 1,000
    // nested prefixes would make 1,000 calls per value).
    let found: T | undefined;
    let node = this.root;
    let at = 0;
    for (;;) {
      if (node.ends) found = node.value;
      if (at >= value.length) return found;
      const child = childOf(node.children, value.charCodeAt(at));
      if (child === undefined || (child.label.length > 1 && !value.startsWith(child.label, at))) return found;
      at += child.label.length;
      node = child;
    }
  }

  private find(key: string): Node<T> | undefined {
    let node = this.root;
    let at = 0;
    while (at < key.length) {
      const child = childOf(node.children, key.charCodeAt(at));
      if (child === undefined || !key.startsWith(child.label, at)) return undefined;
      at += child.label.length;
      node = child;
    }
    return at === key.length ? node : undefined;
  }
}
