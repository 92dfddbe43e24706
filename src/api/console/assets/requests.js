// Requests (admin): the gateway's recent requests (`GET /v1/requests`),
// newest first, refreshed while the page is open, filtered by route, key,
// status and time; one opened shows its time line
// (`GET /v1/requests/{id}`). A key that is not an admin key is refused,
// with the gateway's own words.

import * as api from '/console/api.js';
import { el, show, note, select, ms, usd, when } from '/console/text.js';
import { timeline, statusClass } from '/console/timeline.js';
import { admin } from '/console/keys.js';

const REFRESH_MS = 2000;
const SINCE = [['', 'any time'], ['300', 'last 5 minutes'], ['3600', 'last hour'], ['86400', 'last day']];

export async function mount(root) {
  if (!(await admin(root, 'Requests'))) return null;
  const route = el('input', { type: 'text', placeholder: 'route', 'data-testid': 'requests-route' });
  const key = el('input', { type: 'text', placeholder: 'key name', 'data-testid': 'requests-key' });
  const status = el('input', { type: 'text', placeholder: 'status: 200, 4xx, stream_error', 'data-testid': 'requests-status' });
  const since = select({ 'data-testid': 'requests-since', 'aria-label': 'since' }, SINCE, '');
  const live = el('input', { type: 'checkbox', checked: true, 'data-testid': 'requests-live' });
  const list = el('div', { class: 'list' });
  const detail = el('div', { class: 'detail', 'data-testid': 'requests-detail' });
  let timer = null;
  let opened = null;

  async function load() {
    const q = new URLSearchParams({ limit: '200' });
    if (route.value.trim()) q.set('route', route.value.trim());
    if (key.value.trim()) q.set('key', key.value.trim());
    if (status.value.trim()) q.set('status', status.value.trim());
    if (since.value) q.set('since', String(Math.floor(Date.now() / 1000) - Number(since.value)));
    try {
      const body = await api.json(`/v1/requests?${q}`);
      show(list, rows(body.data || [], openOne));
    } catch (e) {
      show(list, note('error', e.status === 404
        ? 'The ring of recent requests is off on this gateway (console.recent_requests = 0).'
        : e.message, 'requests-error'));
    }
  }

  async function openOne(id) {
    opened = id;
    try {
      const r = await api.json(`/v1/requests/${encodeURIComponent(id)}`);
      if (opened === id) show(detail, el('h3', { text: `Request ${id}` }), timeline(r));
    } catch (e) {
      show(detail, note('error', e.message));
    }
  }

  for (const input of [route, key, status]) input.addEventListener('change', load);
  since.addEventListener('change', load);
  const tick = () => {
    clearInterval(timer);
    timer = live.checked ? setInterval(load, REFRESH_MS) : null;
  };
  live.addEventListener('change', tick);
  show(root, el('h2', { text: 'Requests' }),
    el('div', { class: 'row filters' }, route, key, status, since, el('label', {}, live, ' live')),
    el('div', { class: 'split wide' }, el('div', { class: 'main-col scroll' }, list), el('div', { class: 'side' }, detail)));
  await load();
  tick();
  return () => clearInterval(timer);
}

function rows(data, openOne) {
  if (!data.length) return note('note', 'No requests yet (or none match).');
  const body = el('tbody');
  for (const r of data) {
    const tr = el('tr', { 'data-testid': 'requests-row', 'data-id': r.id, tabindex: 0, class: 'clickable' },
      el('td', { text: when(r.started_at).slice(11), title: when(r.started_at) }),
      el('td', { text: r.route }),
      el('td', { text: r.key }),
      el('td', { text: r.strategy || '–' }),
      el('td', {}, el('span', { class: 'status ' + statusClass(r.status), text: r.status })),
      el('td', { text: ms(r.duration_ms) }),
      el('td', { text: usd(r.cost_usd) }),
      el('td', { class: 'dim id', text: r.id, title: r.id }));
    tr.addEventListener('click', () => openOne(r.id));
    tr.addEventListener('keydown', (e) => { if (e.key === 'Enter') openOne(r.id); });
    body.append(tr);
  }
  return el('table', { class: 'requests' },
    el('thead', {}, el('tr', {}, ['started', 'route', 'key', 'strategy', 'status', 'took', 'cost', 'id'].map((h) => el('th', { text: h })))),
    body);
}
