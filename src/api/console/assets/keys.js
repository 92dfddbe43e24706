// Keys and spend (admin): per key its limits, its rate limits' use now and its
// budget today (`GET /v1/keys/usage`); per route and per model today's
// requests, tokens and cost (`GET /v1/usage`); a link to Grafana for
// history when `console.grafana_url` is set.

import * as api from '/console/api.js';
import { el, show, note, num, usd, table } from '/console/text.js';

/// Whether this key may see admin pages; when not, `root` says why in the
/// gateway's own words. Asks `/v1/usage`: admin-only, and answered from
/// this instance's memory (it needs no shared state).
export async function admin(root, title) {
  try {
    await api.json('/v1/usage');
    return true;
  } catch (e) {
    if (e.status === 401) throw e;
    show(root, el('h2', { text: title }), note('error',
      e.status === 403 ? `This page needs an admin key. ${e.message}` : e.message, 'admin-refused'));
    return false;
  }
}

/// A per-minute limit's use now: `used / limit`, what is left, and when
/// it is whole again; `no limit` without one.
function rate(inUse, limit) {
  if (!inUse || limit === null || limit === undefined) return 'no limit';
  const whole = inUse.resets_in_ms ? ` · whole in ${Math.ceil(inUse.resets_in_ms / 1000)} s` : '';
  return `${num(inUse.used)} / ${num(limit)} (${num(inUse.remaining)} left${whole})`;
}

export async function mount(root) {
  if (!(await admin(root, 'Keys and spend'))) return null;
  const [usage, today] = await Promise.all([
    api.json('/v1/keys/usage'),
    api.json('/v1/usage').catch((e) => ({ error: e.message })),
  ]);
  const grafana = document.body.dataset.grafana;
  const keys = usage.data || [];
  const keyRows = keys.map((k) => {
    const now = k.now || {};
    const l = k.limits || {};
    const t = k.today || {};
    const left = k.remaining || {};
    return [k.name, k.admin ? 'admin' : '',
      rate(now.rpm, l.rpm),
      rate(now.tpm, l.tpm),
      `${num(t.tokens)} tok · ${usd(t.cost_usd)}`,
      `${left.tokens === null || left.tokens === undefined ? 'no cap' : num(left.tokens) + ' tok'} · ${left.cost_usd === null || left.cost_usd === undefined ? 'no cap' : usd(left.cost_usd)}`];
  });
  const parts = [el('h2', { text: 'Keys and spend' })];
  parts.push(keys.length
    ? table(['key', '', 'requests per minute: in use / rpm', 'tokens per minute: in use / tpm', 'spent today', 'left today'], keyRows, { 'data-testid': 'keys-row' })
    : note('note', 'This gateway has no [[keys]]: nothing is limited per key.'));
  if (today.error) {
    parts.push(note('error', `Today's usage: ${today.error}`));
  } else {
    parts.push(el('h3', { text: `Today (${today.day || 'UTC'}), per route` }));
    parts.push(table(['route', 'requests', 'errors', 'input tokens', 'output tokens', 'cost'],
      (today.routes || []).map((r) => [r.route, num(r.requests), num(r.errors), num(r.input_tokens), num(r.output_tokens), usd(r.cost_usd)]),
      { 'data-testid': 'usage-route-row' }));
    parts.push(el('h3', { text: 'Today, per model' }));
    parts.push(table(['model', 'upstream', 'attempts', 'input tokens', 'output tokens', 'cost'],
      (today.models || []).map((m) => [m.model, m.upstream, num(m.attempts), num(m.input_tokens), num(m.output_tokens), usd(m.cost_usd)]),
      { 'data-testid': 'usage-model-row' }));
    parts.push(el('p', { class: 'dim', text: 'Counted by this gateway instance since the start of the UTC day (or since it started); the same counts as its Prometheus metrics.' }));
  }
  if (grafana) {
    parts.push(el('p', {}, 'History: ', el('a', { href: grafana, rel: 'noopener noreferrer', target: '_blank', 'data-testid': 'grafana-link' }, 'open the Grafana dashboards')));
  }
  show(root, ...parts);
  return null;
}
