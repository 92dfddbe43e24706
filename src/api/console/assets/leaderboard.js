// Leaderboard: an arena route's contestants ranked by Bradley–Terry
// rating from every stored vote (`GET /v1/arena/leaderboard`), with their
// 95 % intervals drawn as a chart; or every arena route's votes pooled
// (`route=*`) where routes share models; over a time range.

import * as api from '/console/api.js';
import { el, show, note, select, num, table } from '/console/text.js';

const RANGES = [
  ['all', 'all time', 0],
  ['1h', 'last hour', 3600],
  ['24h', 'last 24 hours', 86400],
  ['7d', 'last 7 days', 7 * 86400],
  ['30d', 'last 30 days', 30 * 86400],
];

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

export async function mount(root) {
  const arenas = (await api.models()).filter((m) => m.strategy === 'arena');
  if (!arenas.length) {
    show(root, el('h2', { text: 'Leaderboard' }), note('note', 'This key may use no arena route.'));
    return null;
  }
  const opts = arenas.map((a) => [a.id, a.id]);
  if (arenas.length > 1) opts.push(['*', 'all arena routes (pooled)']);
  const routeSel = select({ 'data-testid': 'leaderboard-route', 'aria-label': 'route' }, opts, arenas[0].id);
  const rangeSel = select({ 'data-testid': 'leaderboard-range', 'aria-label': 'time range' }, RANGES.map(([v, l]) => [v, l]), 'all');
  const refresh = el('button', { type: 'button', class: 'quiet', 'data-testid': 'leaderboard-refresh' }, 'Refresh');
  const out = el('div', { class: 'board' });

  async function load() {
    const range = RANGES.find(([v]) => v === rangeSel.value);
    let q = `route=${encodeURIComponent(routeSel.value)}`;
    if (range && range[2]) q += `&since=${Math.floor(Date.now() / 1000) - range[2]}`;
    try {
      const board = await api.json(`/v1/arena/leaderboard?${q}`);
      show(out, view(board));
    } catch (e) {
      show(out, note('error', e.message, 'leaderboard-error'));
    }
  }
  routeSel.addEventListener('change', load);
  rangeSel.addEventListener('change', load);
  refresh.addEventListener('click', load);
  show(root, el('h2', { text: 'Leaderboard' }),
    el('div', { class: 'row' }, el('label', {}, 'Route ', routeSel), el('label', {}, 'Votes from ', rangeSel), refresh),
    out);
  await load();
  return null;
}

function view(board) {
  const rows = board.data || [];
  const total = board.votes ?? rows.reduce((s, r) => s + (r.votes || 0), 0) / 2;
  const comparisons = board.comparisons ?? null;
  const head = el('p', { class: 'dim' },
    `${num(Math.round(total))} vote${Math.round(total) === 1 ? '' : 's'}`
    + (comparisons === null ? '' : ` (${num(comparisons)} pairwise comparisons)`)
    + ' · ratings are Bradley–Terry on an Elo-like scale, bars their 95 % intervals');
  const t = table(['#', 'model', 'rating', '95 % interval', 'comparisons', 'wins', 'losses', 'ties', 'win rate'],
    rows.map((r, i) => [i + 1, r.model, r.rating, `${r.ci_low} – ${r.ci_high}`, r.votes, r.wins, r.losses, r.ties,
      r.win_rate === null || r.win_rate === undefined ? '–' : `${(r.win_rate * 100).toFixed(1)} %`]),
    { 'data-testid': 'leaderboard-row' });
  return el('div', {}, head, chart(rows), t);
}

/// Each model's rating as a dot on its 95 % interval, best on top.
function chart(rows) {
  if (!rows.length) return null;
  const W = 720;
  const rowH = 28;
  const left = 170;
  const right = 20;
  const H = rows.length * rowH + 30;
  const lo = Math.min(...rows.map((r) => r.ci_low));
  const hi = Math.max(...rows.map((r) => r.ci_high));
  const pad = Math.max(10, (hi - lo) * 0.05);
  const x0 = lo - pad;
  const x1 = hi + pad;
  const x = (v) => left + ((v - x0) / (x1 - x0)) * (W - left - right);
  const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': 'ratings with 95% intervals', 'data-testid': 'leaderboard-chart' });
  const ticks = 5;
  for (let i = 0; i <= ticks; i++) {
    const v = x0 + ((x1 - x0) * i) / ticks;
    s.append(svg('line', { x1: x(v), x2: x(v), y1: 4, y2: H - 22, class: 'grid' }));
    s.append(svg('text', { x: x(v), y: H - 6, 'text-anchor': 'middle', class: 'axis' }, Math.round(v)));
  }
  rows.forEach((r, i) => {
    const y = 18 + i * rowH;
    const g = svg('g', { class: 'point', tabindex: 0 });
    g.append(svg('title', {}, `${r.model}: ${r.rating} (95 % ${r.ci_low}–${r.ci_high}), ${r.votes} votes`));
    g.append(svg('text', { x: left - 8, y: y + 4, 'text-anchor': 'end', class: 'label' }, r.model));
    g.append(svg('line', { x1: x(r.ci_low), x2: x(r.ci_high), y1: y, y2: y, class: 'ci' }));
    g.append(svg('circle', { cx: x(r.rating), cy: y, r: 5, class: 'dot' }));
    s.append(g);
  });
  return s;
}
