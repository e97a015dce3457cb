// @vitest-environment happy-dom
import { describe, expect, it } from 'vitest';
import { renderInline, renderMarkdown, safeHref } from '../src/markdown';

const ALLOWED_TAGS = new Set([
  'P', 'BR', 'STRONG', 'EM', 'CODE', 'PRE', 'UL', 'OL', 'LI', 'A', 'BLOCKQUOTE', 'HR',
]);
const ALLOWED_ATTRS: Record<string, Set<string>> = {
  A: new Set(['href', 'rel', 'target', 'referrerpolicy', 'class', 'title']),
  OL: new Set(['start']),
  P: new Set(['class']),
};

function html(md: string): string {
  const div = document.createElement('div');
  div.append(renderMarkdown(md));
  return div.innerHTML;
}

function box(md: string): HTMLDivElement {
  const div = document.createElement('div');
  div.append(renderMarkdown(md));
  return div;
}

/** Every node is an allowed element with allowed attributes; every href is http(s). */
function assertInert(root: HTMLElement): void {
  for (const el of Array.from(root.querySelectorAll('*'))) {
    expect(ALLOWED_TAGS.has(el.tagName), `unexpected <${el.tagName}>`).toBe(true);
    for (const attr of Array.from(el.attributes)) {
      expect(attr.name.startsWith('on'), `event handler attribute ${attr.name}`).toBe(false);
      expect(ALLOWED_ATTRS[el.tagName]?.has(attr.name) ?? false, `attribute ${attr.name} on <${el.tagName}>`).toBe(true);
    }
    if (el.tagName === 'A') {
      const href = el.getAttribute('href') ?? '';
      expect(/^https?:\/\//.test(href), `href ${href}`).toBe(true);
      expect(el.getAttribute('rel')).toContain('noopener');
    }
    if (el.tagName === 'OL' && el.hasAttribute('start')) {
      expect(el.getAttribute('start')).toMatch(/^\d+$/);
    }
  }
}

describe('markdown: the subset', () => {
  it('paragraphs and line breaks', () => {
    expect(html('one\ntwo\n\nthree')).toBe('<p>one<br>two</p><p>three</p>');
  });

  it('bold, italic, inline code', () => {
    expect(html('**b** and *i* and _i_ and `c`')).toBe(
      '<p><strong>b</strong> and <em>i</em> and <em>i</em> and <code>c</code></p>',
    );
    expect(html('***both***')).toBe('<p><strong><em>both</em></strong></p>');
    expect(html('**bold with *it* inside**')).toBe('<p><strong>bold with <em>it</em> inside</strong></p>');
  });

  it('leaves snake_case and lone stars alone', () => {
    expect(html('snake_case_name and 2 * 3 * 4')).toBe('<p>snake_case_name and 2 * 3 * 4</p>');
    expect(html('**unclosed')).toBe('<p>**unclosed</p>');
  });

  it('code inside backticks is literal', () => {
    expect(html('`**not bold** <b>`')).toBe('<p><code>**not bold** &lt;b&gt;</code></p>');
  });

  it('fenced code blocks keep text verbatim', () => {
    expect(html('```js\nconst a = "<x>";\n  **y**\n```\nafter')).toBe(
      '<pre><code>const a = "&lt;x&gt;";\n  **y**</code></pre><p>after</p>',
    );
  });

  it('an unclosed fence runs to the end', () => {
    expect(html('```\ncode')).toBe('<pre><code>code</code></pre>');
  });

  it('bullet and numbered lists, nested', () => {
    expect(html('- a\n- b\n  - c\n- d')).toBe('<ul><li>a</li><li>b<ul><li>c</li></ul></li><li>d</li></ul>');
    expect(html('1. one\n2. two')).toBe('<ol><li>one</li><li>two</li></ol>');
    expect(html('3. three\n4. four')).toBe('<ol start="3"><li>three</li><li>four</li></ol>');
    expect(html('intro\n- a\n- b')).toBe('<p>intro</p><ul><li>a</li><li>b</li></ul>');
  });

  it('links: http(s) only, with rel=noopener', () => {
    const d = box('see [docs](https://example.com/a?b=1) and https://example.org/x.');
    const links = d.querySelectorAll('a');
    expect(links.length).toBe(2);
    expect(links[0].getAttribute('href')).toBe('https://example.com/a?b=1');
    expect(links[0].textContent).toBe('docs');
    expect(links[1].getAttribute('href')).toBe('https://example.org/x');
    expect(d.textContent).toBe('see docs and https://example.org/x.');
    assertInert(d);
  });

  it('headings and quotes are plain blocks', () => {
    expect(html('# Title\n> quoted')).toBe(
      '<p class="md-heading"><strong>Title</strong></p><blockquote><p>quoted</p></blockquote>',
    );
  });

  it('inline renderer keeps a single line', () => {
    const div = document.createElement('div');
    div.append(renderInline('**Budget**: 50k'));
    expect(div.innerHTML).toBe('<strong>Budget</strong>: 50k');
  });
});

describe('markdown: untrusted input stays inert', () => {
  const payloads = [
    '<script>window.__xss = 1</script>',
    '<img src=x onerror="window.__xss=1">',
    '<svg onload=alert(1)>',
    '<iframe src="javascript:alert(1)"></iframe>',
    '<a href="javascript:alert(1)">x</a>',
    '[click](javascript:alert(1))',
    '[click](JaVaScRiPt:alert(1))',
    '[click]( javascript:alert(1) )',
    '[click](jav&#x09;ascript:alert(1))',
    '[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)',
    '[click](vbscript:msgbox(1))',
    '[click](//evil.example/x)',
    '[click](/relative)',
    '![x](https://evil.example/pixel.png)',
    '![x](javascript:alert(1))',
    '[x](https://ok.example/" onmouseover="alert(1))',
    '<style>body{display:none}</style>',
    '<link rel=stylesheet href=https://evil.example/x.css>',
    '<meta http-equiv="refresh" content="0;url=https://evil.example">',
    '<form action=https://evil.example><button>x</button></form>',
    '`<script>alert(1)</script>`',
    '```html\n<script>alert(1)</script>\n```',
    '**<img src=x onerror=alert(1)>**',
    '[**<b>x</b>**](https://ok.example/)',
    '<<script>script>alert(1)<</script>/script>',
    '&lt;script&gt;alert(1)&lt;/script&gt;',
    'javascript:alert(1)',
    '<https://ok.example/"><script>alert(1)</script>>',
    '[a](https://ok.example/)[b](javascript:void(0))',
  ];

  for (const p of payloads) {
    it(`inert: ${p.slice(0, 60)}`, () => {
      const d = box(p);
      assertInert(d);
      expect(d.querySelector('script,img,iframe,svg,style,link,meta,form,object,embed,video,audio')).toBeNull();
      expect((globalThis as { __xss?: number }).__xss).toBeUndefined();
    });
  }

  it('raw HTML is shown as its own text', () => {
    const d = box('<b>hi</b> <img src=x onerror=alert(1)>');
    expect(d.textContent).toBe('<b>hi</b> <img src=x onerror=alert(1)>');
    expect(d.querySelector('b,img')).toBeNull();
  });

  it('images become a link to their URL, never an <img>', () => {
    const d = box('![chart](https://example.com/c.png)');
    expect(d.querySelector('img')).toBeNull();
    expect(d.querySelector('a')?.getAttribute('href')).toBe('https://example.com/c.png');
    expect(d.textContent).toBe('chart');
  });

  it('unsafe links keep their label as text', () => {
    const d = box('[click me](javascript:alert(1))');
    expect(d.querySelector('a')).toBeNull();
    expect(d.textContent).toBe('click me');
  });

  it('safeHref accepts only absolute http(s)', () => {
    expect(safeHref('https://a.example/x')).toBe('https://a.example/x');
    expect(safeHref('HTTP://A.example')).toBe('http://a.example/');
    for (const bad of ['javascript:alert(1)', 'data:text/html,x', '//a.example', '/x', 'ftp://a', 'http:/x', 'mailto:a@b']) {
      expect(safeHref(bad), bad).toBeNull();
    }
  });

  it('deep nesting and long delimiter runs stay bounded', () => {
    const t0 = performance.now();
    const d = box('>'.repeat(5000) + ' deep\n' + '*'.repeat(20000) + '\n' + '['.repeat(20000) + '\n' + '`'.repeat(5000) + '\n' + '- '.repeat(3000) + 'x');
    assertInert(d);
    expect(performance.now() - t0).toBeLessThan(5000);
  });

  it('large messages render in linear time (no quadratic blow-up)', () => {
    // happy-dom is far slower than a browser; the budget only catches runaway parsing.
    const para = 'Some **bold** text with `code`, a [link](https://example.com) and _emphasis_.\n';
    const t0 = performance.now();
    const d = box(para.repeat(1000));
    expect(d.querySelectorAll('strong').length).toBe(1000);
    expect(performance.now() - t0).toBeLessThan(5000);
  });
});
