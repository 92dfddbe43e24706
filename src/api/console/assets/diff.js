// A line diff of two answers (longest common subsequence), for code
// battles. Bounded: answers of more than MAX_LINES lines each are not
// diffed (the table would take MAX_LINES² cells).

import { el } from '/console/text.js';

const MAX_LINES = 2000;

/// `[op, line]` rows: ' ' both, '-' only in `a`, '+' only in `b`; `null`
/// when either side is too long.
export function diffLines(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  if (x.length > MAX_LINES || y.length > MAX_LINES) return null;
  const n = x.length;
  const m = y.length;
  const w = m + 1;
  const len = new Uint16Array((n + 1) * w);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      len[i * w + j] = x[i] === y[j]
        ? len[(i + 1) * w + j + 1] + 1
        : Math.max(len[(i + 1) * w + j], len[i * w + j + 1]);
    }
  }
  const rows = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      rows.push([' ', x[i]]);
      i++;
      j++;
    } else if (len[(i + 1) * w + j] >= len[i * w + j + 1]) {
      rows.push(['-', x[i++]]);
    } else {
      rows.push(['+', y[j++]]);
    }
  }
  while (i < n) rows.push(['-', x[i++]]);
  while (j < m) rows.push(['+', y[j++]]);
  return rows;
}

/// The diff of `a` and `b` as a block, each line marked.
export function diffView(a, b, labels) {
  const rows = diffLines(a, b);
  if (rows === null) {
    return el('p', { class: 'note', 'data-testid': 'diff-view' },
      `Too long to diff (more than ${MAX_LINES} lines).`);
  }
  const pre = el('pre', { class: 'diff', 'data-testid': 'diff-view' });
  pre.append(el('div', { class: 'diff-head', text: `--- ${labels[0]}\n+++ ${labels[1]}` }));
  for (const [op, line] of rows) {
    const cls = op === '-' ? 'del' : op === '+' ? 'add' : 'same';
    pre.append(el('div', { class: cls, text: `${op} ${line}` }));
  }
  return pre;
}
