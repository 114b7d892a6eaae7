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

/** A {@link PrefixTrie} laid out for walking (see `compile`). */
interface Flat<T> {
  /** 1 where a key ends at the node. */
  ends: Uint8Array;
  /** The node's first edge in `codes` and `targets`, and how many it has. */
  starts: Int32Array;
  counts: Int32Array;
  /** Per edge, sorted within a node: the first code unit of the child's label, and the child. */
  codes: Int32Array;
  targets: Int32Array;
  /** Per node, the label of the edge into it and its length. */
  labels: string[];
  lengths: Int32Array;
  values: (T | undefined)[];
}

function sortedChildren<T>(children: Children<T>): [number, Node<T>][] {
  const pairs: [number, Node<T>][] =
    children.map !== undefined ? [...children.map] : children.codes.map((c, i) => [c, children.nodes[i] as Node<T>]);
  return pairs.sort((a, b) => a[0] - b[0]);
}

/** The child of a node whose edges are `codes[start, start + count)` for `code`, or -1: scanned when few, halved when many. */
function step(start: number, count: number, code: number, codes: Int32Array, targets: Int32Array): number {
  if (count <= SCAN) {
    for (let i = start, end = start + count; i < end; i++) if (codes[i] === code) return targets[i] as number;
    return -1;
  }
  let lo = start;
  let hi = start + count - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const c = codes[mid] as number;
    if (c === code) return targets[mid] as number;
    if (c < code) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
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
  /** The walking layout, built on the first walk after a change. */
  private flat: Flat<T> | undefined;

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
    this.flat = undefined;
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
    const flat = this.flat ?? this.compile();
    const { ends, starts, counts, codes, targets, labels, lengths, values } = flat;
    const length = value.length;
    let node = 0;
    let at = 0;
    for (;;) {
      if (ends[node] === 1) visit(values[node] as T);
      if (at >= length) return;
      const child = step(starts[node] as number, counts[node] as number, value.charCodeAt(at), codes, targets);
      if (child < 0) return;
      const n = lengths[child] as number;
      if (n > 1 && !value.startsWith(labels[child] as string, at)) return;
      at += n;
      node = child;
    }
  }

  /** The value of the longest key that is a prefix of `value`. */
  longest(value: string): T | undefined {
    // prefixesOf's walk, keeping the last key met instead of calling back at each (a chain of 1,000
    // nested prefixes would make 1,000 calls per value).
    const flat = this.flat ?? this.compile();
    const { ends, starts, counts, codes, targets, labels, lengths, values } = flat;
    const length = value.length;
    let found = -1;
    let node = 0;
    let at = 0;
    for (;;) {
      if (ends[node] === 1) found = node;
      if (at >= length) break;
      const child = step(starts[node] as number, counts[node] as number, value.charCodeAt(at), codes, targets);
      if (child < 0) break;
      const n = lengths[child] as number;
      if (n > 1 && !value.startsWith(labels[child] as string, at)) break;
      at += n;
      node = child;
    }
    return found < 0 ? undefined : values[found];
  }

  /**
   * The trie laid out flat for walking: nodes numbered breadth-first (the root 0), each node's children a
   * run of `codes` and `targets` sorted by code. A walk then reads a few typed arrays per character instead
   * of chasing objects (about 4× faster on a chain of 1,000 one-character edges). Rebuilt after a `set`.
   */
  private compile(): Flat<T> {
    const order: Node<T>[] = [this.root];
    for (let i = 0; i < order.length; i++) {
      const children = (order[i] as Node<T>).children;
      if (children !== undefined) for (const c of sortedChildren(children)) order.push(c[1]);
    }
    const size = order.length;
    const flat: Flat<T> = {
      ends: new Uint8Array(size),
      starts: new Int32Array(size),
      counts: new Int32Array(size),
      codes: new Int32Array(size),
      targets: new Int32Array(size),
      labels: new Array<string>(size),
      lengths: new Int32Array(size),
      values: new Array<T | undefined>(size),
    };
    const index = new Map<Node<T>, number>(order.map((node, i) => [node, i]));
    let edge = 0;
    for (let i = 0; i < size; i++) {
      const node = order[i] as Node<T>;
      flat.ends[i] = node.ends ? 1 : 0;
      flat.values[i] = node.value;
      flat.labels[i] = node.label;
      flat.lengths[i] = node.label.length;
      flat.starts[i] = edge;
      const children = node.children === undefined ? [] : sortedChildren(node.children);
      flat.counts[i] = children.length;
      for (const [code, child] of children) {
        flat.codes[edge] = code;
        flat.targets[edge] = index.get(child) as number;
        edge++;
      }
    }
    this.flat = flat;
    return flat;
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
