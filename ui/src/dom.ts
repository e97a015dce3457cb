// Tiny DOM helpers. Text always goes in through text nodes; nothing here parses HTML.

type Child = Node | string | number | null | undefined | false;
type Props = Record<string, unknown> | null;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props?: Props, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = String(v);
      else if (k.startsWith('on') && typeof v === 'function') {
        el.addEventListener(k.slice(2).toLowerCase(), v as EventListener);
      } else if (k === 'text') el.textContent = String(v);
      else if (k in el && !k.includes('-') && typeof v !== 'string') {
        (el as unknown as Record<string, unknown>)[k] = v;
      } else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

export function append(el: Element | DocumentFragment, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

export function clear(el: Element): void {
  while (el.firstChild) el.firstChild.remove();
}

// ---- time -------------------------------------------------------------------------------------

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
const dateTimeFmt = new Intl.DateTimeFormat(undefined, {
  weekday: 'short',
  day: 'numeric',
  month: 'short',
  hour: '2-digit',
  minute: '2-digit',
});
const fullFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

function parse(t: string | null | undefined): Date | null {
  if (!t) return null;
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? null : d;
}

export function clockTime(t: string | null | undefined): string {
  const d = parse(t);
  return d ? timeFmt.format(d) : '';
}

export function fullTime(t: string | null | undefined): string {
  const d = parse(t);
  return d ? fullFmt.format(d) : '';
}

export function dateTime(t: string | null | undefined): string {
  const d = parse(t);
  return d ? dateTimeFmt.format(d) : '';
}

/** `m:ss`, or `h:mm:ss` from an hour on. */
export function duration(ms: number): string {
  const total = Math.max(0, Math.floor(ms / 1000));
  const s = total % 60;
  const m = Math.floor(total / 60) % 60;
  const hh = Math.floor(total / 3600);
  const ss = String(s).padStart(2, '0');
  return hh > 0 ? `${hh}:${String(m).padStart(2, '0')}:${ss}` : `${m}:${ss}`;
}

export function elapsedSince(t: string | null | undefined, until?: string | null): string {
  const a = parse(t);
  if (!a) return '';
  const b = parse(until ?? null);
  return duration((b ? b.getTime() : Date.now()) - a.getTime());
}

export async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // Fallback for contexts without the async clipboard.
    const ta = h('textarea', { class: 'sr-only', 'aria-hidden': 'true' });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    let ok = false;
    try {
      ok = document.execCommand('copy');
    } catch {
      ok = false;
    }
    ta.remove();
    return ok;
  }
}

/** A small "Copy" button for `get()`'s text that says for a moment whether it could. */
export function copyButton(label: string, get: () => string, id?: string): HTMLButtonElement {
  const btn = h('button', { class: 'btn btn-small', type: 'button', id, 'aria-label': `Copy ${label}` }, 'Copy');
  btn.addEventListener('click', async () => {
    const ok = await copyText(get());
    btn.textContent = ok ? 'Copied' : 'Copy failed';
    setTimeout(() => (btn.textContent = 'Copy'), 1500);
  });
  return btn;
}
