// Playground: chat with any route or model this key may use, streamed,
// with the API's parameters (a JSON editor for any of them, and for tools),
// and beside the answer what the strategy did: the request's record
// (`GET /v1/requests/{id}`, asked for while it runs and once it ends) as a
// time line of attempts and the strategy's events.

import * as api from '/console/api.js';
import { el, show, note, select, Answer } from '/console/text.js';
import { timeline } from '/console/timeline.js';
import { conversation } from '/console/text.js';

const POLL_MS = 500;

export async function mount(root) {
  const models = await api.models();
  const routes = models.filter((m) => m.route);
  const plain = models.filter((m) => !m.route);
  const opts = [...routes, ...plain].map((m) => [m.id, m.route ? `${m.id} (${m.strategy})` : `${m.id} (model)`]);
  const first = (routes.find((m) => m.strategy === 'chain') || routes[0] || plain[0] || {}).id;
  const routeSel = select({ 'data-testid': 'playground-route', 'aria-label': 'route or model' }, opts, first);
  const system = el('input', { type: 'text', placeholder: 'system prompt (optional)', 'data-testid': 'playground-system' });
  const prompt = el('textarea', { rows: 4, 'data-testid': 'playground-prompt', placeholder: 'Your message (or a pasted conversation)' });
  const stream = el('input', { type: 'checkbox', checked: true, 'data-testid': 'playground-stream' });
  const params = el('textarea', {
    rows: 3, class: 'json', 'data-testid': 'playground-params', spellcheck: 'false',
    placeholder: '{"temperature": 0.7, "max_tokens": 512} — any chat completion parameter',
  });
  const toolsOn = el('input', { type: 'checkbox', 'data-testid': 'playground-tools-on' });
  const tools = el('textarea', {
    rows: 5, class: 'json', 'data-testid': 'playground-tools', spellcheck: 'false', hidden: true,
    text: JSON.stringify([{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }], null, 2),
  });
  toolsOn.addEventListener('change', () => { tools.hidden = !toolsOn.checked; });
  const send = el('button', { type: 'button', 'data-testid': 'playground-send' }, 'Send');
  const status = el('div', { class: 'status-line', 'data-testid': 'playground-status' });
  const answerBox = el('div', { class: 'answer-wrap' });
  const side = el('div', { class: 'side', 'data-testid': 'playground-timeline' },
    el('p', { class: 'dim', text: 'What the strategy did shows here while the request runs.' }));
  let ctl = null;

  send.addEventListener('click', async () => {
    let body;
    try {
      body = request(routeSel.value, system.value, prompt.value, stream.checked, params.value, toolsOn.checked ? tools.value : null);
    } catch (e) {
      show(status, note('error', e.message, 'playground-error'));
      return;
    }
    if (ctl) ctl.abort();
    ctl = new AbortController();
    send.disabled = true;
    try {
      await run(body, { status, answerBox, side }, ctl.signal);
    } finally {
      send.disabled = false;
    }
  });

  show(root, el('h2', { text: 'Playground' }),
    el('div', { class: 'split' },
      el('div', { class: 'main-col' },
        el('div', { class: 'row' }, el('label', {}, 'Route ', routeSel), el('label', {}, stream, ' stream')),
        system, prompt,
        el('details', {}, el('summary', { text: 'Parameters and tools' }),
          el('label', { class: 'block' }, 'Parameters (JSON object, merged into the request)', params),
          el('label', {}, toolsOn, ' tools'), tools),
        el('div', { class: 'row' }, send, status),
        answerBox),
      side));
  return () => ctl && ctl.abort();
}

/// The chat completion request the form describes; throws a readable
/// error for JSON that does not parse or has the wrong shape.
function request(model, system, text, stream, params, tools) {
  if (!text.trim()) throw new Error('Write a message first.');
  const messages = conversation(text);
  if (system.trim()) messages.unshift({ role: 'system', content: system });
  const body = { model, messages, stream };
  if (stream) body.stream_options = { include_usage: true };
  if (params.trim()) {
    let p;
    try {
      p = JSON.parse(params);
    } catch (e) {
      throw new Error(`Parameters are not JSON: ${e.message}`);
    }
    if (!p || typeof p !== 'object' || Array.isArray(p)) throw new Error('Parameters must be a JSON object.');
    Object.assign(body, p, { model, messages });
  }
  if (tools !== null) {
    let t;
    try {
      t = JSON.parse(tools);
    } catch (e) {
      throw new Error(`Tools are not JSON: ${e.message}`);
    }
    if (!Array.isArray(t)) throw new Error('Tools must be a JSON array of tool definitions.');
    body.tools = t;
  }
  return body;
}

async function run(body, ui, signal) {
  const rid = api.requestId();
  // One answer per choice (`n` > 1, or an arena's columns).
  const boxes = el('div', { class: 'answers' });
  const answers = [];
  const answerOf = (i) => {
    if (!answers[i]) {
      answers[i] = new Answer(i === 0
        ? { 'data-testid': 'playground-answer', 'data-request-id': rid }
        : { 'data-testid': 'playground-choice', 'data-index': i });
      boxes.append(answers[i].box);
    }
    return answers[i];
  };
  const answer = answerOf(0);
  const calls = el('div', { class: 'tool-calls' });
  show(ui.answerBox, boxes, calls);
  show(ui.status, el('span', { class: 'dim', text: 'asking…' }));
  show(ui.side, el('p', { class: 'dim', text: 'waiting for the request\'s first attempt…' }));
  let done = false;
  let polling;
  let cache = null;
  const poll = async () => {
    while (!done && !signal.aborted) {
      await record(rid, ui.side, true, signal);
      await sleep(POLL_MS);
    }
  };
  const started = performance.now();
  let failed = null;
  // From the start: a strategy may hold its answer back while it works.
  polling = poll();
  try {
    const resp = await api.call('/v1/chat/completions', { method: 'POST', body, headers: { 'x-request-id': rid }, signal });
    cache = resp.headers.get('x-conclave-cache');
    if (body.stream) {
      const toolArgs = [];
      for await (const chunk of api.events(resp)) {
        if (chunk.error) {
          failed = chunk.error.message || 'the stream failed';
          break;
        }
        for (const choice of chunk.choices || []) {
          if (!choice.delta || !Number.isInteger(choice.index) || choice.index < 0 || choice.index > 127) continue;
          if (choice.delta.content) answerOf(choice.index).append(choice.delta.content);
          if (choice.index !== 0) continue;
          for (const tc of choice.delta.tool_calls || []) {
          const i = tc.index || 0;
          toolArgs[i] = toolArgs[i] || { name: '', args: '' };
          if (tc.function && tc.function.name) toolArgs[i].name += tc.function.name;
          if (tc.function && tc.function.arguments) toolArgs[i].args += tc.function.arguments;
          }
        }
      }
      show(calls, toolArgs.filter(Boolean).map((t) => el('pre', { class: 'code', text: `tool call ${t.name}(${t.args})` })));
    } else {
      const whole = await resp.json();
      for (const c of whole.choices || []) {
        if (Number.isInteger(c.index) && c.index > 0 && c.index < 128) answerOf(c.index).append((c.message && c.message.content) || '');
      }
      const msg = (whole.choices && whole.choices[0] && whole.choices[0].message) || {};
      answer.append(msg.content || '');
      show(calls, (msg.tool_calls || []).map((t) => el('pre', { class: 'code', text: `tool call ${t.function.name}(${t.function.arguments})` })));
    }
  } catch (e) {
    if (e.name === 'AbortError') return;
    failed = e.message;
  }
  done = true;
  answers.forEach((a) => a && a.render(true));
  const took = Math.round(performance.now() - started);
  show(ui.status, failed ? note('error', failed, 'playground-error')
    : el('span', { class: 'dim', text: `${took} ms · ${cache && cache !== 'off' ? `cache ${cache} · ` : ''}${rid}` }));
  // The send button is free again; the record is followed in the
  // background until it is complete (a new send stops it).
  settle(rid, ui.side, polling, signal);
}

/// Asks for the record until it says the request is over.
async function settle(rid, side, polling, signal) {
  await polling;
  for (let i = 0; i < 20 && !signal.aborted; i++) {
    if (await record(rid, side, false, signal)) return;
    await sleep(150);
  }
}

/// Shows request `rid`'s record; whether it is finished.
async function record(rid, side, quiet, signal) {
  try {
    const r = await api.json(`/v1/requests/${encodeURIComponent(rid)}`, { signal });
    show(side, timeline(r));
    return r.status !== 'running';
  } catch (e) {
    if (e.name === 'AbortError') return true;
    if (e.status === 404 && quiet) return false;
    if (e.status === 404) {
      show(side, note('note', 'No record of this request: the ring of recent requests is off (console.recent_requests = 0) or the request was not kept.'));
      return false;
    }
    show(side, note('error', e.message));
    return false;
  }
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}
