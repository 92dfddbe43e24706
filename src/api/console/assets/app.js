// The console's shell: asks for a key (and calls nothing before it has
// one), checks it once against `/v1/models`, then shows the page the URL's
// hash names. Each page is a module with `mount(root)`, which may return a
// function that stops what it started (polling, a stream).

import * as api from '/console/api.js';
import { show, note } from '/console/text.js';
import * as battle from '/console/battle.js';
import * as leaderboard from '/console/leaderboard.js';
import * as playground from '/console/playground.js';
import * as requests from '/console/requests.js';
import * as keys from '/console/keys.js';

const PAGES = { battle, leaderboard, playground, requests, keys };

const $ = (id) => document.getElementById(id);
let stop = null;

function signedIn(yes) {
  $('login').hidden = yes;
  $('nav').hidden = !yes;
  $('signout').hidden = !yes || !api.keyed;
  $('page').hidden = !yes;
  if (!yes) {
    if (stop) stop();
    stop = null;
    show($('page'));
    $('who').textContent = '';
    $('key-input').focus();
  }
}

// Which opening is current: a page that finishes mounting after another
// was opened stops at once and shows nothing.
let generation = 0;

async function open() {
  if (stop) stop();
  stop = null;
  const mine = ++generation;
  let name = location.hash.replace(/^#/, '');
  if (!PAGES[name]) {
    // The default page gets its hash, so its link opens nothing twice.
    name = 'battle';
    history.replaceState(null, '', '#battle');
  }
  const page = PAGES[name];
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('here', a.getAttribute('href') === '#' + name);
  }
  const root = $('page');
  const here = document.createElement('div');
  show(root, here);
  try {
    const cleanup = (await page.mount(here)) || null;
    if (mine !== generation) {
      if (cleanup) cleanup();
      return;
    }
    stop = cleanup;
  } catch (e) {
    if (mine !== generation) return;
    if (e instanceof api.ApiError && e.status === 401) return refused(e.message);
    show(here, note('error', e.message || String(e), 'page-error'));
  }
}

function refused(message) {
  api.forgetKey();
  signedIn(false);
  $('key-error').textContent = `This key was refused: ${message}`;
}

async function submit(ev) {
  ev.preventDefault();
  const value = $('key-input').value.trim();
  $('key-error').textContent = '';
  if (!value) {
    $('key-error').textContent = 'Paste an API key first.';
    return;
  }
  api.setKey(value);
  try {
    await api.models();
  } catch (e) {
    if (e.status === 401) return refused(e.message);
    api.forgetKey();
    $('key-error').textContent = `The gateway could not check the key: ${e.message}`;
    return;
  }
  $('key-input').value = '';
  start();
}

function start() {
  signedIn(true);
  $('who').textContent = api.keyed ? 'key in this tab' : 'no keys on this gateway (local use)';
  open();
}

$('key-form').addEventListener('submit', submit);
$('signout').addEventListener('click', () => {
  api.forgetKey();
  signedIn(false);
});
window.addEventListener('hashchange', () => {
  if (api.ready()) open();
});

if (api.ready()) start();
else signedIn(false);

