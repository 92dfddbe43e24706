// What a request did, from its record (`GET /v1/requests/{id}`): its
// attempts on a time line (a waterfall: when each started and how long it
// took, with its model, role, verdict, tokens and cost), and the
// strategy's own events (a panel's ranking, a race's candidates, a vote's
// counts, an oracle's consults, a lane's swaps, failovers).

import { el, ms, usd, num, table } from '/console/text.js';

const time = (ts) => (ts ? Date.parse(ts) : NaN);

/// The record's time line, as one element.
export function timeline(record) {
  const started = time(record.request && record.request.ts);
  const attempts = record.attempts || [];
  const running = record.status === 'running';
  let end = Number.isFinite(started) ? started + (record.duration_ms || 0) : NaN;
  for (const a of attempts) {
    const t = time(a.ts);
    if (Number.isFinite(t)) end = Math.max(end || 0, t + (a.duration_ms || 0));
  }
  const origin = Number.isFinite(started)
    ? started
    : Math.min(...attempts.map((a) => time(a.ts)).filter(Number.isFinite));
  const span = Math.max(1, (end || origin) - origin);
  const box = el('div', { class: 'timeline', 'data-testid': 'timeline', 'data-request-id': record.id, 'data-status': record.status });
  box.append(summary(record, running));
  const rows = el('div', { class: 'waterfall' });
  for (const a of attempts) rows.append(attemptRow(a, origin, span));
  if (!attempts.length) rows.append(el('p', { class: 'note' }, running ? 'No attempt has finished yet.' : 'No attempts.'));
  box.append(rows);
  const events = (record.events || []).filter((e) => e.event !== 'request');
  if (events.length) {
    box.append(el('h4', { text: 'What the strategy did' }));
    box.append(el('div', { class: 'events' }, events.map(eventView)));
  }
  const dropped = (record.attempts_dropped || 0) + (record.events_dropped || 0);
  if (dropped) box.append(el('p', { class: 'note' }, `${dropped} lines were left out of this record (its bounds).`));
  return box;
}

function summary(r, running) {
  const req = r.request || {};
  return el('div', { class: 'summary' },
    el('span', { class: 'status ' + statusClass(r.status) }, running ? 'running…' : r.status),
    req.cached ? el('span', { class: 'status ok', 'data-testid': 'timeline-cached' }, 'cached') : null,
    el('span', {}, `${r.route} · ${r.strategy || req.strategy || ''}`),
    el('span', {}, ms(r.duration_ms)),
    el('span', {}, `${num(req.input_tokens)} in / ${num(req.output_tokens)} out`),
    el('span', {}, usd(r.cost_usd)),
    el('span', { class: 'dim' }, r.id));
}

export function statusClass(status) {
  const s = String(status || '');
  if (s === 'running') return 'run';
  if (s.startsWith('2')) return 'ok';
  if (s.startsWith('4')) return 'warn';
  return 'bad';
}

function verdictClass(v) {
  if (['accept', 'winner', 'ok'].includes(v)) return 'ok';
  if (['escalate', 'loser', 'cancelled', 'rejected'].includes(v)) return 'warn';
  if (v === 'error' || v === 'failed') return 'bad';
  return '';
}

function attemptRow(a, origin, span) {
  const start = Math.max(0, time(a.ts) - origin);
  const bar = el('div', { class: 'bar ' + verdictClass(a.verdict) });
  bar.style.left = `${Math.min(100, (start / span) * 100)}%`;
  bar.style.width = `${Math.max(0.5, Math.min(100, ((a.duration_ms || 0) / span) * 100))}%`;
  const tokens = a.input_tokens !== null && a.input_tokens !== undefined
    ? `${num(a.input_tokens)}→${num(a.output_tokens)} tok` : '';
  const row = el('div', { class: 'attempt', 'data-testid': 'timeline-attempt' },
    el('div', { class: 'actor' },
      el('strong', { text: a.model }),
      el('span', { class: 'role', text: a.role }),
      el('span', { class: 'verdict ' + verdictClass(a.verdict), text: a.verdict })),
    el('div', { class: 'lane' }, bar),
    el('div', { class: 'nums' },
      el('span', {}, ms(a.duration_ms)),
      el('span', {}, tokens),
      el('span', {}, usd(a.cost_usd))));
  const more = [];
  if (a.feedback) more.push(el('div', { class: 'feedback' }, `feedback: ${a.feedback}`));
  if (a.error) more.push(el('div', { class: 'error' }, `error: ${a.error}`));
  if (a.retry) more.push(el('div', { class: 'dim' }, `retried after: ${a.retry}`));
  if (a.queued_ms >= 1) more.push(el('div', { class: 'dim' }, `waited ${ms(a.queued_ms)} for its lane`));
  if (a.output_summary) {
    more.push(el('details', {}, el('summary', { text: 'what it wrote' }),
      el('div', { class: 'answer plain', text: a.output_summary })));
  }
  if (more.length) row.append(el('div', { class: 'more' }, more));
  return row;
}

/// One strategy event, by kind; unknown kinds as their fields.
function eventView(e) {
  const head = el('div', { class: 'event-head', text: String(e.event).replace(/_/g, ' ') });
  const body = el('div', { class: 'event-body' });
  // A field the ring left out for its size is `{"left_out_bytes": N}`:
  // such an event is shown as its fields.
  const list = (x) => (Array.isArray(x) ? x : []);
  const shaped = {
    judge_ranking: Array.isArray(e.ranking),
    race_finished: Array.isArray(e.candidates ?? []) && Array.isArray(e.cancelled ?? []),
    vote_finished: e.counts && typeof e.counts === 'object' && !('left_out_bytes' in e.counts),
  };
  switch (shaped[e.event] === false ? 'fields' : e.event) {
    case 'judge_ranking':
      body.append(table(['rank', 'label', 'model', 'score', 'reason'],
        list(e.ranking).map((r) => [r.rank, r.label, r.model, r.score, r.reason])));
      body.append(el('div', { class: 'dim' }, `synthesis: ${e.synthesis || '–'}`));
      break;
    case 'race_candidate':
      body.append(el('div', {}, `${e.model}: ${e.verdict}, score ${fixed(e.total)}`),
        el('div', { class: 'dim' }, Object.entries(e.signals || {}).map(([k, v]) => `${k} ${fixed(v)}`).join(' · ')));
      break;
    case 'race_finished':
      body.append(el('div', {}, `winner ${e.winner} (score ${fixed(e.score)}) of ${list(e.candidates).join(', ')}`),
        el('div', { class: 'dim' }, `cancelled: ${list(e.cancelled).join(', ') || 'none'} · ${ms(e.elapsed_ms)}`));
      break;
    case 'vote_finished':
      body.append(table(['answer', 'votes'],
        Object.entries(e.counts || {}).sort((x, y) => y[1] - x[1]).map(([k, v]) => [k, v])));
      body.append(el('div', { class: 'dim' }, `winner ${e.winner} · agreement ${fixed(e.agreement)} · cancelled ${e.cancelled} · failed ${e.failed}`));
      break;
    case 'cache_hit':
      body.append(el('div', {}, `answered from the ${e.layer === 'model' ? `model ${e.model}'s` : 'route\'s'} cache, stored ${e.age_s ?? '?'} s before`));
      break;
    case 'lane_swap':
      body.append(el('div', {}, `${e.upstream}: ${e.from || 'nothing'} → ${e.to}`));
      break;
    default:
      body.append(table(['field', 'value'], Object.entries(e)
        .filter(([k]) => !['ts', 'request_id', 'route', 'event'].includes(k))
        .map(([k, v]) => [k, typeof v === 'object' ? JSON.stringify(v) : v])));
  }
  return el('div', { class: 'event', 'data-testid': 'timeline-event' }, head, body);
}

function fixed(x) {
  return typeof x === 'number' ? x.toFixed(3) : String(x ?? '–');
}
