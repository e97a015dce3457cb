// A safe Markdown subset for untrusted assistant text, built as DOM nodes — never as HTML.
//
// Supported: paragraphs, line breaks, **bold**, *italic*, `inline code`, fenced code blocks,
// bullet and numbered lists (nested by indentation), block quotes, headings (shown as bold
// lines), rules, and links. Raw HTML is shown as the text it is. A link becomes an <a> only for
// an absolute http(s) URL (rel="noopener noreferrer nofollow", new window); anything else is shown
// as plain text. Images are never loaded: `![alt](url)` becomes a plain link (or text).
//
// Every string from the assistant reaches the DOM through createTextNode or a validated href.

const MAX_DEPTH = 8;
const LINK_REL = 'noopener noreferrer nofollow';

/** The absolute http(s) URL to link to, or null when the text must not become a link. */
export function safeHref(raw: string): string | null {
  const s = raw.trim();
  if (!/^https?:\/\//i.test(s)) return null;
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    return null;
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
  return u.href;
}

function link(doc: Document, href: string, children: Node[] | string): HTMLAnchorElement {
  const a = doc.createElement('a');
  a.setAttribute('href', href);
  a.setAttribute('rel', LINK_REL);
  a.setAttribute('target', '_blank');
  a.setAttribute('referrerpolicy', 'no-referrer');
  a.className = 'md-link';
  a.title = href;
  if (typeof children === 'string') a.append(doc.createTextNode(children));
  else a.append(...children);
  return a;
}

// ---------------------------------------------------------------------------------------------
// Inline.

const PUNCT = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
/** Emphasis by delimiter run length: the elements it makes, outermost first. */
const EMPHASIS: [number, (keyof HTMLElementTagNameMap)[]][] = [
  [3, ['strong', 'em']],
  [2, ['strong']],
  [1, ['em']],
];
const isSpace = (c: string | undefined) => c === undefined || c === ' ' || c === '\t' || c === '\n';
const isAlnum = (c: string | undefined) => !!c && /[\p{L}\p{N}]/u.test(c);

class Inline {
  private out: Node[] = [];
  private text = '';
  /** Delimiters known to have no closer after the current position (keeps parsing linear). */
  private noCloser = new Set<string>();

  constructor(
    private doc: Document,
    private s: string,
    private depth: number,
    private inLink: boolean,
  ) {}

  private flush(): void {
    if (this.text) {
      this.out.push(this.doc.createTextNode(this.text));
      this.text = '';
    }
  }

  private push(n: Node): void {
    this.flush();
    this.out.push(n);
  }

  private sub(s: string, inLink = this.inLink): Node[] {
    if (this.depth >= MAX_DEPTH) return [this.doc.createTextNode(s)];
    return new Inline(this.doc, s, this.depth + 1, inLink).run();
  }

  /** Finds a closing `delim` after `from` that follows a non-space; -1 if none. */
  private closer(delim: string, from: number, intraword: boolean): number {
    if (this.noCloser.has(delim)) return -1;
    const s = this.s;
    let i = from;
    for (;;) {
      i = s.indexOf(delim, i);
      if (i < 0) {
        // No occurrence after `from`, hence none after any later position either.
        this.noCloser.add(delim);
        return -1;
      }
      const before = s[i - 1];
      const after = s[i + delim.length];
      if (i > from && !isSpace(before) && (intraword || !isAlnum(after))) {
        // A single delimiter does not close on a doubled run (that one is bold).
        if (delim.length === 1 && (after === delim || before === delim)) {
          i += 1;
          continue;
        }
        return i;
      }
      i += 1;
    }
  }

  run(): Node[] {
    const n = this.s.length;
    let i = 0;
    while (i < n) {
      const next = this.construct(i);
      if (next >= 0) {
        i = next;
        continue;
      }
      this.text += this.s[i];
      i++;
    }
    this.flush();
    return this.out;
  }

  /** The construct starting at `i`, written out: the index after it; -1: a plain character. */
  private construct(i: number): number {
    const s = this.s;
    const c = s[i];
    // Backslash escapes.
    if (c === '\\' && i + 1 < s.length && PUNCT.includes(s[i + 1])) {
      this.text += s[i + 1];
      return i + 2;
    }
    if (c === '`') return this.codeSpan(i);
    if ((c === '!' && s[i + 1] === '[') || c === '[') return this.linkOrImage(i);
    if (c === '<') return this.autolink(i);
    if ((c === 'h' || c === 'H') && !this.inLink && !isAlnum(s[i - 1])) return this.bareUrl(i);
    if (c === '*' || c === '_') return this.emphasis(i);
    // Hard line breaks inside a paragraph.
    if (c === '\n') {
      this.text = this.text.replace(/ +$/, '');
      this.push(this.doc.createElement('br'));
      return i + 1;
    }
    return -1;
  }

  /** A code span at `i` (a run of backticks; unclosed, the run is text). */
  private codeSpan(i: number): number {
    const s = this.s;
    const n = s.length;
    let j = i;
    while (j < n && s[j] === '`') j++;
    const run = s.slice(i, j);
    const key = 'code' + run.length;
    let end = -1;
    if (!this.noCloser.has(key)) {
      let k = j;
      for (;;) {
        k = s.indexOf(run, k);
        if (k < 0) break;
        let e = k;
        while (e < n && s[e] === '`') e++;
        if (e - k === run.length) {
          end = k;
          break;
        }
        k = e;
      }
      if (end < 0) this.noCloser.add(key);
    }
    if (end < 0) {
      this.text += run;
      return j;
    }
    let body = s.slice(j, end).replace(/\n/g, ' ');
    if (body.length > 2 && body.startsWith(' ') && body.endsWith(' ') && body.trim()) body = body.slice(1, -1);
    const code = this.doc.createElement('code');
    code.append(this.doc.createTextNode(body));
    this.push(code);
    return end + run.length;
  }

  /** An image (never loaded: a link to it, or its label) or a link at `i`. */
  private linkOrImage(i: number): number {
    const c = this.s[i];
    const img = c === '!';
    const parsed = this.linkAt(img ? i + 1 : i);
    if (!parsed) {
      this.text += c;
      return i + 1;
    }
    const href = safeHref(parsed.url);
    if (img) {
      const label = parsed.label.trim() || parsed.url;
      if (href && !this.inLink) this.push(link(this.doc, href, label));
      else this.text += label;
    } else if (href && !this.inLink) {
      this.push(link(this.doc, href, this.sub(parsed.label, true)));
    } else {
      for (const node of this.sub(parsed.label)) this.push(node);
    }
    return parsed.end;
  }

  /** A `<https://…>` autolink at `i`; -1 when there is none. */
  private autolink(i: number): number {
    const m = /^<(https?:\/\/[^\s<>]+)>/i.exec(this.s.slice(i, i + 2048));
    if (!m) return -1;
    const href = safeHref(m[1]);
    if (href && !this.inLink) this.push(link(this.doc, href, m[1]));
    else this.text += m[1];
    return i + m[0].length;
  }

  /** A bare http(s) URL at `i`; -1 when there is none. */
  private bareUrl(i: number): number {
    const m = /^https?:\/\/[^\s<>"']+/i.exec(this.s.slice(i, i + 2048));
    if (!m) return -1;
    let url = m[0];
    // Trailing punctuation belongs to the sentence, and a `)` only if unbalanced.
    for (;;) {
      const last = url[url.length - 1];
      if ('.,;:!?*_'.includes(last)) url = url.slice(0, -1);
      else if (last === ')' && (url.match(/\(/g)?.length ?? 0) < (url.match(/\)/g)?.length ?? 0)) url = url.slice(0, -1);
      else break;
    }
    const href = safeHref(url);
    if (!href) return -1;
    this.push(link(this.doc, href, url));
    return i + url.length;
  }

  /** Emphasis at `i` (a run of `*` or `_`): strong + em, strong or em; unclosed, the run is text. */
  private emphasis(i: number): number {
    const s = this.s;
    const c = s[i];
    let j = i;
    while (j < s.length && s[j] === c) j++;
    const runLen = j - i;
    const intraword = c === '*';
    const leftOk = intraword || !isAlnum(s[i - 1]);
    if (leftOk && !isSpace(s[j])) {
      // The longest run that closes wins: *** (strong em), then ** (strong), then * (em).
      for (const [len, tags] of EMPHASIS) {
        if (runLen < len || (len === 1 && runLen !== 1)) continue;
        const e = this.closer(c.repeat(len), i + len, intraword);
        if (e > i + len) {
          const outer = this.doc.createElement(tags[0]);
          let inner: HTMLElement = outer;
          for (const t of tags.slice(1)) {
            const el = this.doc.createElement(t);
            inner.append(el);
            inner = el;
          }
          inner.append(...this.sub(s.slice(i + len, e)));
          this.push(outer);
          return e + len;
        }
      }
    }
    this.text += s.slice(i, j);
    return j;
  }

  /** `[label](url "title")` starting at `start` (the `[`). */
  private linkAt(start: number): { label: string; url: string; end: number } | null {
    if (this.noCloser.has(']')) return null;
    const s = this.s;
    let depth = 0;
    let i = start;
    const limit = Math.min(s.length, start + 4096);
    for (; i < limit; i++) {
      const c = s[i];
      if (c === '\\') {
        i++;
        continue;
      }
      if (c === '[') depth++;
      else if (c === ']') {
        depth--;
        if (depth === 0) break;
      }
    }
    if (i >= limit) {
      if (limit === s.length) this.noCloser.add(']');
      return null;
    }
    if (s[i + 1] !== '(') return null;
    const label = s.slice(start + 1, i);
    let j = i + 2;
    let par = 1;
    const ulimit = Math.min(s.length, j + 4096);
    for (; j < ulimit; j++) {
      const c = s[j];
      if (c === '\\') {
        j++;
        continue;
      }
      if (c === '(') par++;
      else if (c === ')') {
        par--;
        if (par === 0) break;
      } else if (c === '\n') return null;
    }
    if (j >= ulimit) return null;
    let inner = s.slice(i + 2, j).trim();
    const titled = /^(\S+)\s+(?:"[^"]*"|'[^']*')$/.exec(inner);
    if (titled) inner = titled[1];
    if (inner.startsWith('<') && inner.endsWith('>')) inner = inner.slice(1, -1);
    return { label, url: inner, end: j + 1 };
  }
}

export function renderInline(text: string, doc: Document = document): DocumentFragment {
  const frag = doc.createDocumentFragment();
  frag.append(...new Inline(doc, text, 0, false).run());
  return frag;
}

// ---------------------------------------------------------------------------------------------
// Blocks.

const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;
const HEADING = /^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;

const blank = (l: string) => l.trim() === '';
const indentOf = (l: string) => l.length - l.trimStart().length;

function startsBlock(line: string): boolean {
  return FENCE.test(line) || HEADING.test(line) || QUOTE.test(line) || RULE.test(line) || ITEM.test(line);
}

function blocks(doc: Document, lines: string[], depth: number): Node[] {
  const out: Node[] = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (blank(line)) {
      i++;
      continue;
    }
    let m: RegExpExecArray | null;
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body: string[] = [];
      i++;
      const close = new RegExp(`^ {0,3}${fence[0] === '`' ? '`' : '~'}{${fence.length},}[ \\t]*$`);
      while (i < lines.length && !close.test(lines[i])) body.push(lines[i++]);
      i++; // the closing fence (or the end)
      const pre = doc.createElement('pre');
      const code = doc.createElement('code');
      code.append(doc.createTextNode(body.join('\n')));
      pre.append(code);
      out.push(pre);
      continue;
    }
    if (RULE.test(line)) {
      out.push(doc.createElement('hr'));
      i++;
      continue;
    }
    if ((m = HEADING.exec(line))) {
      const p = doc.createElement('p');
      p.className = 'md-heading';
      const strong = doc.createElement('strong');
      strong.append(renderInline(m[2], doc));
      p.append(strong);
      out.push(p);
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const inner: string[] = [];
      while (i < lines.length && !blank(lines[i])) {
        const q = QUOTE.exec(lines[i]);
        inner.push(q ? q[1] : lines[i]);
        i++;
      }
      const bq = doc.createElement('blockquote');
      if (depth >= MAX_DEPTH) bq.append(doc.createTextNode(inner.join('\n')));
      else bq.append(...blocks(doc, inner, depth + 1));
      out.push(bq);
      continue;
    }
    if (ITEM.test(line)) {
      const r = list(doc, lines, i, depth);
      out.push(r.node);
      i = r.next;
      continue;
    }
    // Paragraph: until a blank line or the start of another block.
    const para: string[] = [line.trim()];
    i++;
    while (i < lines.length && !blank(lines[i]) && !startsBlock(lines[i])) para.push(lines[i++].trim());
    const p = doc.createElement('p');
    p.append(renderInline(para.join('\n'), doc));
    out.push(p);
  }
  return out;
}

function list(doc: Document, lines: string[], start: number, depth: number): { node: Node; next: number } {
  const first = ITEM.exec(lines[start])!;
  const base = first[1].length;
  const ordered = /\d/.test(first[2]);
  const el = doc.createElement(ordered ? 'ol' : 'ul');
  if (ordered) {
    const n = parseInt(first[2], 10);
    if (n !== 1 && Number.isFinite(n)) el.setAttribute('start', String(n));
  }
  let i = start;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length > base + 1 || m[1].length < base || /\d/.test(m[2]) !== ordered) break;
    // One item: its first line, continuation lines, and nested blocks (more indented).
    const itemLines: string[] = [m[3]];
    const contentIndent = m[1].length + m[2].length + 1;
    i++;
    while (i < lines.length) {
      const l = lines[i];
      if (blank(l)) {
        // A blank line continues the item only if something more indented follows.
        let k = i + 1;
        while (k < lines.length && blank(lines[k])) k++;
        if (k < lines.length && indentOf(lines[k]) >= Math.min(contentIndent, base + 2)) {
          itemLines.push('');
          i++;
          continue;
        }
        break;
      }
      const sub = ITEM.exec(l);
      if (sub && sub[1].length <= base + 1) break; // a sibling
      if (!sub && indentOf(l) <= base && startsBlock(l)) break;
      itemLines.push(l.slice(Math.min(indentOf(l), contentIndent)));
      i++;
    }
    const li = doc.createElement('li');
    const nested = itemLines.slice(1).some((l) => ITEM.test(l) || blank(l) || FENCE.test(l));
    if (!nested) {
      li.append(renderInline(itemLines.join('\n'), doc));
    } else if (depth >= MAX_DEPTH) {
      li.append(doc.createTextNode(itemLines.join('\n')));
    } else {
      const kids = blocks(doc, itemLines, depth + 1);
      // A tight item's first paragraph is shown inline.
      if (kids[0] && kids[0].nodeName === 'P') {
        const p = kids.shift() as HTMLElement;
        li.append(...Array.from(p.childNodes));
      }
      li.append(...kids);
    }
    el.append(li);
    // A blank line between items keeps the list going.
    if (i < lines.length && blank(lines[i])) {
      let k = i;
      while (k < lines.length && blank(lines[k])) k++;
      const nm = k < lines.length ? ITEM.exec(lines[k]) : null;
      if (nm && nm[1].length >= base && nm[1].length <= base + 1 && /\d/.test(nm[2]) === ordered) i = k;
      else break;
    }
  }
  return { node: el, next: i };
}

/** Renders untrusted Markdown into a fragment of safe nodes. */
export function renderMarkdown(text: string, doc: Document = document): DocumentFragment {
  const frag = doc.createDocumentFragment();
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  frag.append(...blocks(doc, lines, 0));
  return frag;
}
