/** Attributes of {@link h}: strings and numbers become attributes, functions `on…` listeners. */
type Attributes = Record<string, string | number | boolean | undefined | ((event: Event) => void)>;

/** Builds an element: `h('label', { class: 'field' }, 'Limit', input)`. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Attributes = {},
  ...children: (Node | string | undefined)[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === false) continue;
    if (typeof value === 'function') element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children) {
    if (child !== undefined) element.append(child);
  }
  return element;
}

/** Calls `run` once input has been quiet for `ms`, so typing a number redraws once. */
export function debounce(run: () => void, ms: number): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(run, ms);
  };
}

/** Seconds for axes and labels: at most 3 decimals. */
export function seconds(us: number): string {
  return `${Math.round(us / 1000) / 1000} s`;
}
