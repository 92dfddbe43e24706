// The console's one way to the gateway: the key from sessionStorage sent as
// `Authorization: Bearer`, OpenAI-shaped errors read into ApiError, and a
// reader for streamed (SSE) answers.

const STORE = 'conclave.console.key';

export const keyed = document.body.dataset.keyed === 'true';

export function key() {
  return sessionStorage.getItem(STORE);
}

export function setKey(value) {
  sessionStorage.setItem(STORE, value);
}

export function forgetKey() {
  sessionStorage.removeItem(STORE);
}

/// Whether the console may call the API: it has a key, or needs none.
export function ready() {
  return !keyed || !!key();
}

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/// A fetch of `path` with the key; a non-2xx answer throws an ApiError
/// with the gateway's own message.
export async function call(path, { method = 'GET', body, headers = {}, signal } = {}) {
  if (!ready()) throw new ApiError(401, 'No API key yet.', 'no_key');
  const h = { ...headers };
  const k = key();
  if (keyed && k) h.Authorization = 'Bearer ' + k;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const resp = await fetch(path, {
    method,
    headers: h,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    // A GET is never answered from the browser's cache. A POST is not
    // cached by browsers anyway, and `no-store` would send
    // `Cache-Control: no-cache`, which tells the gateway's own cache to
    // skip its lookup.
    cache: method === 'GET' ? 'no-store' : 'default',
    credentials: 'omit',
  });
  if (!resp.ok) throw await failure(resp);
  return resp;
}

export async function json(path, opts) {
  return (await call(path, opts)).json();
}

async function failure(resp) {
  let message = `${resp.status} ${resp.statusText}`;
  let code = null;
  try {
    const body = await resp.json();
    if (body && body.error) {
      message = body.error.message || message;
      code = body.error.code || null;
    }
  } catch (_) {
    // Not JSON: the status says it.
  }
  return new ApiError(resp.status, message, code);
}

/// Each JSON `data:` event of a streamed answer, until `[DONE]`. A line
/// longer than `MAX_LINE` is skipped, so a broken stream cannot grow the
/// buffer without end.
const MAX_LINE = 8 * 1024 * 1024;

export async function* events(resp) {
  const reader = resp.body.getReader();
  try {
    yield* lines(reader);
  } finally {
    // Left early (an error event, [DONE], a new request): stop reading.
    reader.cancel().catch(() => {});
  }
}

async function* lines(reader) {
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, at).replace(/\r$/, '');
      buf = buf.slice(at + 1);
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]') return;
      try {
        yield JSON.parse(data);
      } catch (_) {
        // Not JSON: not ours to show.
      }
    }
    if (buf.length > MAX_LINE) buf = '';
  }
}

/// A fresh request id (sent as `x-request-id`, so the console can find
/// the request's record while and after it runs).
export function requestId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return 'console-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/// The models and routes this key may use (`/v1/models`).
export async function models() {
  const body = await json('/v1/models');
  return (body.data || []).map((m) => ({
    id: m.id,
    strategy: (m.conclave && m.conclave.strategy) || 'passthrough',
    route: !!(m.conclave && m.conclave.route),
  }));
}
