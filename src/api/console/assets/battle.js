// Battle: one prompt to an arena route's contestants, answered blind as
// columns A, B, C… streamed side by side (each with its time to first
// token, tokens/s and tokens), then a vote through the arena's own vote
// API (one vote, by this key, before the route's vote_ttl), which reveals
// who was who. A diff compares any two answers. With no contestants
// picked the route picks its pair; with 2–6 picked, those answer.

import * as api from '/console/api.js';
import { el, show, note, select, Answer, conversation } from '/console/text.js';
import { diffView } from '/console/diff.js';

const LETTERS = 'ABCDEF';
const MAX = 6;

export async function mount(root) {
  const arenas = (await api.models()).filter((m) => m.strategy === 'arena');
  if (!arenas.length) {
    show(root, el('h2', { text: 'Battle' }),
      note('note', 'This key may use no arena route. Add a route with strategy = "arena" (docs/console.md).', 'battle-none'));
    return null;
  }
  let ctl = null;
  const routeSel = select({ 'data-testid': 'battle-route', 'aria-label': 'arena route' },
    arenas.map((a) => [a.id, a.id]), arenas[0].id);
  const picks = el('div', { class: 'picks', 'data-testid': 'battle-models' });
  const prompt = el('textarea', {
    'data-testid': 'battle-prompt', rows: 4,
    placeholder: 'A prompt, or a pasted conversation (user: … / assistant: … lines, or a JSON array of messages)',
  });
  const send = el('button', { 'data-testid': 'battle-send', type: 'button' }, 'Battle');
  const status = el('div', { class: 'status-line', 'data-testid': 'battle-status' });
  const grid = el('div', { class: 'columns' });
  const after = el('div', { class: 'after' });

  async function loadPool() {
    show(picks, el('span', { class: 'dim', text: 'contestants…' }));
    try {
      const board = await api.json(`/v1/arena/leaderboard?route=${encodeURIComponent(routeSel.value)}`);
      const names = (board.data || []).map((s) => s.model).sort();
      show(picks, el('span', { class: 'dim', text: 'Contestants (none picked: the route picks two):' }),
        names.map((n) => el('label', { class: 'pick' },
          el('input', { type: 'checkbox', value: n, 'data-testid': 'battle-model' }), n)));
    } catch (e) {
      show(picks, note('error', e.message));
    }
  }
  routeSel.addEventListener('change', loadPool);
  await loadPool();

  send.addEventListener('click', async () => {
    const picked = [...picks.querySelectorAll('input:checked')].map((i) => i.value);
    if (picked.length === 1 || picked.length > MAX) {
      show(status, note('error', `Pick 2 to ${MAX} contestants, or none for the route's own pair.`));
      return;
    }
    if (!prompt.value.trim()) {
      show(status, note('error', 'Write a prompt first.'));
      return;
    }
    if (ctl) ctl.abort();
    ctl = new AbortController();
    send.disabled = true;
    try {
      await run(routeSel.value, picked, conversation(prompt.value), { grid, status, after }, ctl.signal);
    } finally {
      send.disabled = false;
    }
  });

  show(root,
    el('h2', { text: 'Battle' }),
    el('div', { class: 'row' }, el('label', {}, 'Arena route ', routeSel), picks),
    prompt,
    el('div', { class: 'row' }, send, status),
    grid,
    after);
  return () => ctl && ctl.abort();
}

/// One column per contestant.
function column(letter) {
  const answer = new Answer({ 'data-testid': 'battle-column', 'data-letter': letter });
  const name = el('span', { class: 'model', 'data-testid': 'battle-model-name' });
  const stats = el('span', { class: 'stats', 'data-testid': 'battle-stats' }, 'waiting…');
  const box = el('div', { class: 'column' }, el('div', { class: 'col-head' }, el('strong', { text: letter }), name, stats), answer.box);
  return { letter, answer, name, stats, box, first: null, last: null, tokens: 0, done: false };
}

function statsText(c, sent) {
  if (c.first === null) return c.done ? 'no answer' : 'waiting…';
  const ttft = Math.round(c.first - sent);
  const secs = (c.last - c.first) / 1000;
  const rate = secs > 0 && c.tokens > 1 ? ((c.tokens - 1) / secs).toFixed(1) : '–';
  return `TTFT ${ttft} ms · ${rate} tok/s · ${c.tokens} tok${c.done ? '' : ' …'}`;
}

async function run(route, picked, messages, ui, signal) {
  const n = picked.length || 2;
  const cols = Array.from({ length: n }, (_, i) => column(LETTERS[i]));
  show(ui.grid, cols.map((c) => c.box));
  ui.grid.dataset.n = String(n);
  show(ui.after);
  show(ui.status, el('span', { class: 'dim', text: 'asking…' }));
  const body = { model: route, messages, stream: true, stream_options: { include_usage: true } };
  if (picked.length) body.contestants = picked;
  const sent = performance.now();
  let timer = null;
  const tick = () => cols.forEach((c) => { c.stats.textContent = statsText(c, sent); });
  let arenaId = null;
  let failed = null;
  try {
    const resp = await api.call('/v1/chat/completions', {
      method: 'POST', body, headers: { 'x-request-id': api.requestId() }, signal,
    });
    arenaId = resp.headers.get('x-conclave-arena-id');
    const state = resp.headers.get('x-conclave-arena');
    timer = setInterval(tick, 250);
    for await (const chunk of api.events(resp)) {
      if (chunk.error) {
        failed = chunk.error.message || 'the stream failed';
        break;
      }
      if (!arenaId && chunk.arena_id) arenaId = chunk.arena_id;
      for (const choice of chunk.choices || []) {
        const c = cols[choice.index];
        if (!c) continue;
        const text = choice.delta && choice.delta.content;
        if (text) {
          const now = performance.now();
          if (c.first === null) c.first = now;
          c.last = now;
          c.tokens += 1;
          c.answer.append(text);
        }
        if (choice.finish_reason) c.done = true;
      }
    }
    if (state === 'incomplete') failed = 'Only one contestant answered, so there is nothing to vote on.';
    if (state === 'unrecorded') failed = 'The arena could not be recorded, so there is nothing to vote on.';
  } catch (e) {
    if (e.name === 'AbortError') return;
    failed = e.message;
  } finally {
    if (timer) clearInterval(timer);
  }
  cols.forEach((c) => { c.done = true; c.answer.render(true); });
  tick();
  // A contestant that failed before it answered is left out of the battle
  // (the others keep their letters), so it gets no vote.
  const answered = cols.filter((c) => c.first !== null);
  cols.filter((c) => c.first === null).forEach((c) => c.box.classList.add('absent'));
  if (failed) {
    show(ui.status, note('error', failed, 'battle-error'));
  } else {
    show(ui.status, el('span', { class: 'dim', text: arenaId ? `arena ${arenaId}` : '' }));
  }
  if (arenaId && !failed && answered.length >= 2) show(ui.after, votePanel(arenaId, answered), diffPanel(answered));
  else show(ui.after, diffPanel(answered));
}

function votePanel(arenaId, cols) {
  const box = el('div', { class: 'vote' });
  const result = el('div', { class: 'reveal', 'data-testid': 'reveal', hidden: true });
  const buttons = [];
  const cast = async (vote) => {
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const v = await api.json(`/v1/arena/${encodeURIComponent(arenaId)}/vote`, { method: 'POST', body: vote });
      reveal(v, cols, result);
    } catch (e) {
      buttons.forEach((b) => { b.disabled = false; });
      show(result, note('error', e.message, 'vote-error'));
      result.hidden = false;
    }
  };
  const pickRow = el('div', { class: 'row' }, el('span', { text: 'Which is better? ' }));
  for (const c of cols) {
    const b = el('button', { type: 'button', 'data-testid': `vote-${c.letter}`, onclick: () => cast({ pick: c.letter }) }, `${c.letter} is best`);
    buttons.push(b);
    pickRow.append(b);
  }
  const tie = el('button', { type: 'button', 'data-testid': 'vote-tie', onclick: () => cast({ pick: 'tie' }) }, 'Tie');
  const bad = el('button', { type: 'button', 'data-testid': 'vote-bad', onclick: () => cast({ pick: 'bad' }) }, 'All bad');
  const skip = el('button', { type: 'button', class: 'quiet', 'data-testid': 'vote-skip', onclick: () => cast({ pick: 'skip' }) }, 'Skip');
  buttons.push(tie, bad, skip);
  pickRow.append(tie, bad, skip);
  box.append(pickRow);
  if (cols.length > 2) box.append(rankPanel(cols, cast, buttons));
  box.append(result);
  return box;
}

/// Drag (or move with the arrows) to rank every answer, best first.
function rankPanel(cols, cast, buttons) {
  const list = el('ol', { class: 'ranking', 'data-testid': 'rank-list' });
  let dragged = null;
  const item = (letter) => {
    const li = el('li', { draggable: 'true', 'data-letter': letter, 'data-testid': 'rank-item' },
      el('span', { class: 'grip', text: '⠿' }), ` ${letter} `,
      el('button', { type: 'button', class: 'quiet', 'aria-label': `move ${letter} up`, onclick: () => li.previousElementSibling && list.insertBefore(li, li.previousElementSibling) }, '↑'),
      el('button', { type: 'button', class: 'quiet', 'aria-label': `move ${letter} down`, onclick: () => li.nextElementSibling && list.insertBefore(li.nextElementSibling, li) }, '↓'));
    li.addEventListener('dragstart', () => { dragged = li; li.classList.add('dragging'); });
    li.addEventListener('dragend', () => { li.classList.remove('dragging'); dragged = null; });
    li.addEventListener('dragover', (e) => {
      e.preventDefault();
      if (!dragged || dragged === li) return;
      const r = li.getBoundingClientRect();
      list.insertBefore(dragged, e.clientY < r.top + r.height / 2 ? li : li.nextSibling);
    });
    return li;
  };
  cols.forEach((c) => list.append(item(c.letter)));
  const submit = el('button', {
    type: 'button', 'data-testid': 'vote-rank',
    onclick: () => cast({ ranking: [...list.children].map((li) => li.dataset.letter) }),
  }, 'Vote this ranking');
  buttons.push(submit);
  return el('div', { class: 'rank' }, el('span', { class: 'dim', text: 'Or rank them all (drag, or use the arrows), best first:' }), list, submit);
}

function reveal(v, cols, box) {
  const models = v.models || { A: v.a, B: v.b };
  const ranking = v.ranking || null;
  const winner = v.winner || null;
  for (const c of cols) {
    const m = models[c.letter];
    if (m) c.name.textContent = m;
  }
  const lines = cols.filter((c) => models[c.letter]).map((c) => {
    const m = models[c.letter];
    const tag = ranking ? ` (#${ranking.indexOf(c.letter) + 1})` : m === winner ? ' (winner)' : '';
    return el('li', {}, el('strong', { text: c.letter }), ` was ${m}${tag}`);
  });
  const said = ranking ? `ranking ${ranking.join(' > ')}` : `“${v.pick}”`;
  show(box, el('div', {}, `Vote recorded: ${said}.${v.recorded === false ? ' (skipped: not counted)' : ''}`), el('ul', {}, lines));
  box.hidden = false;
}

function diffPanel(cols) {
  if (cols.length < 2) return null;
  const opts = cols.map((c) => [c.letter, c.letter]);
  const a = select({ 'data-testid': 'diff-a', 'aria-label': 'diff from' }, opts, 'A');
  const b = select({ 'data-testid': 'diff-b', 'aria-label': 'diff to' }, opts, 'B');
  const out = el('div', {});
  const go = el('button', {
    type: 'button', class: 'quiet', 'data-testid': 'diff-show',
    onclick: () => {
      const x = cols.find((c) => c.letter === a.value);
      const y = cols.find((c) => c.letter === b.value);
      show(out, diffView(x.answer.text, y.answer.text, [x.letter, y.letter]));
    },
  }, 'Diff');
  return el('div', { class: 'diffbox' }, el('div', { class: 'row' }, 'Compare ', a, ' with ', b, ' ', go), out);
}
