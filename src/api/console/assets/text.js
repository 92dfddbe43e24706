// Everything the console shows is built here from text: elements made with
// createElement and filled with textContent, never parsed HTML. A model's
// answer is rendered as text or as a small, safe Markdown (paragraphs,
// headings, lists, quotes, code, emphasis, links to http(s) and mailto
// only); raw HTML in an answer stays visible text, and images are named,
// never fetched.

/// An element: `attrs` are attributes (`class`, `text` for textContent,
/// `on…` for listeners), `children` nodes or strings (as text).
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

/// Replaces what `parent` shows with `children`.
export function show(parent, ...children) {
  parent.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

export function ms(x) {
  if (x === null || x === undefined) return '–';
  return x >= 10000 ? (x / 1000).toFixed(1) + ' s' : Math.round(x) + ' ms';
}

export function usd(x) {
  if (x === null || x === undefined) return '–';
  if (x === 0) return '$0';
  return x < 0.01 ? '$' + x.toFixed(6) : '$' + x.toFixed(4);
}

export function num(x) {
  return x === null || x === undefined ? '–' : Number(x).toLocaleString('en-US');
}

export function when(unix) {
  if (!unix) return '–';
  return new Date(unix * 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

/// Only these schemes become links.
function safeHref(url) {
  try {
    const u = new URL(url, 'http://invalid.invalid/');
    if (u.origin === 'http://invalid.invalid') return null;
    return ['http:', 'https:', 'mailto:'].includes(u.protocol) ? u.href : null;
  } catch (_) {
    return null;
  }
}

/// Inline Markdown of one line: code, bold, emphasis, links; the rest text.
function inline(text) {
  const out = [];
  // Every run is bounded and stays on its line, so no answer can make
  // this scan quadratic.
  const re = /(`{1,3})([^`\n]{1,500}?)\1|\*\*([^*\n]{1,500})\*\*|__([^_\n]{1,500})__|\*([^*\s][^*\n]{0,500})\*|_([^_\s][^_\n]{0,500})_|!\[([^\]\n]{0,500})\]\(([^)\s]{0,2000})[^)\n]{0,500}\)|\[([^\]\n]{1,500})\]\(([^)\s]{1,2000})[^)\n]{0,500}\)/g;
  let last = 0;
  let m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) out.push(text.slice(last, m.index));
    if (m[2] !== undefined) out.push(el('code', { text: m[2] }));
    else if (m[3] !== undefined || m[4] !== undefined) out.push(el('strong', { text: m[3] ?? m[4] }));
    else if (m[5] !== undefined || m[6] !== undefined) out.push(el('em', { text: m[5] ?? m[6] }));
    else if (m[8] !== undefined) out.push(el('span', { class: 'image', text: `[image: ${m[7] || m[8]}]` }));
    else {
      const href = safeHref(m[10]);
      out.push(href
        ? el('a', { href, rel: 'noopener noreferrer nofollow', target: '_blank', text: m[9] })
        : m[0]);
    }
    last = re.lastIndex;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

/// Longer answers are shown as text: Markdown would not help read them.
const MARKDOWN_MAX = 50000;

/// `text` as safe Markdown, in a fragment.
export function markdown(text) {
  const frag = document.createDocumentFragment();
  const lines = String(text).split('\n');
  let para = [];
  let list = null;
  const flushPara = () => {
    if (para.length) frag.append(el('p', {}, inline(para.join('\n'))));
    para = [];
  };
  const flushList = () => {
    if (list) frag.append(list);
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)/);
    if (fence) {
      flushPara();
      flushList();
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      frag.append(el('pre', { class: 'code', 'data-lang': fence[2] || null }, el('code', { text: body.join('\n') })));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    const bullet = line.match(/^\s*[-*+]\s+(.*)$/);
    const numbered = line.match(/^\s*\d+[.)]\s+(.*)$/);
    const quote = line.match(/^\s*>\s?(.*)$/);
    if (heading) {
      flushPara();
      flushList();
      frag.append(el('h' + Math.min(6, heading[1].length + 2), {}, inline(heading[2])));
    } else if (bullet || numbered) {
      flushPara();
      const tag = bullet ? 'ul' : 'ol';
      if (!list || list.tagName.toLowerCase() !== tag) {
        flushList();
        list = el(tag);
      }
      list.append(el('li', {}, inline((bullet || numbered)[1])));
    } else if (quote) {
      flushPara();
      flushList();
      frag.append(el('blockquote', {}, inline(quote[1])));
    } else if (/^\s*([-*_])\s*(\1\s*){2,}$/.test(line)) {
      flushPara();
      flushList();
      frag.append(el('hr'));
    } else if (line.trim() === '') {
      flushPara();
      flushList();
    } else {
      flushList();
      para.push(line);
    }
  }
  flushPara();
  flushList();
  return frag;
}

/// An answer area: plain text while it streams (appended in place, one
/// DOM write per frame), Markdown or text once done, as the reader picks.
export class Answer {
  constructor(attrs = {}) {
    this.text = '';
    this.pending = '';
    this.node = document.createTextNode('');
    this.box = el('div', { class: 'answer plain', ...attrs }, this.node);
    this.scheduled = false;
  }

  append(s) {
    if (!s) return;
    this.text += s;
    this.pending += s;
    if (!this.scheduled) {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
  }

  flush() {
    this.scheduled = false;
    if (this.pending) {
      this.node.appendData(this.pending);
      this.pending = '';
    }
  }

  /// Shows the whole answer as Markdown (`true`) or as text.
  render(asMarkdown) {
    this.flush();
    this.box.dataset.done = 'true';
    this.box.classList.toggle('plain', !asMarkdown || this.text.length > MARKDOWN_MAX);
    if (asMarkdown && this.text.length <= MARKDOWN_MAX) {
      show(this.box, markdown(this.text));
    } else {
      this.node = document.createTextNode(this.text);
      show(this.box, this.node);
    }
  }
}

/// A labelled select of `options` (`[value, label]`).
export function select(attrs, options, selected) {
  const s = el('select', attrs);
  for (const [value, label] of options) {
    s.append(el('option', { value, selected: value === selected }, label));
  }
  return s;
}

/// A message box: `kind` is `error` or `note`.
export function note(kind, text, testid) {
  return el('p', { class: kind, role: kind === 'error' ? 'alert' : null, 'data-testid': testid || null }, text);
}

/// A table of `rows` (arrays of cells, shown as text) under `headers`;
/// `rowAttrs` on every body row.
export function table(headers, rows, rowAttrs) {
  return el('table', {},
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', { text: h })))),
    el('tbody', {}, rows.map((r) => el('tr', rowAttrs || {}, r.map((c) => el('td', { text: c === null || c === undefined ? '–' : String(c) }))))));
}

/// The messages a prompt box holds: a JSON array of messages, a pasted
/// conversation (`user:` / `assistant:` / `system:` lines), or one user
/// message.
export function conversation(text) {
  const t = text.trim();
  if (t.startsWith('[')) {
    try {
      const m = JSON.parse(t);
      if (Array.isArray(m) && m.every((x) => x && typeof x.role === 'string')) return m;
    } catch (_) {
      // Not JSON: text.
    }
  }
  const turns = [];
  for (const line of text.split('\n')) {
    const m = line.match(/^(user|assistant|system)\s*:\s?(.*)$/i);
    if (m) turns.push({ role: m[1].toLowerCase(), content: m[2] });
    else if (turns.length) turns[turns.length - 1].content += '\n' + line;
    else return [{ role: 'user', content: text }];
  }
  return turns.length ? turns : [{ role: 'user', content: text }];
}
