// The page: controls, progress, streaming output. The engine runs in worker.js.
// Scriptable: index.html?model=stories15M|gemma&prompt=...&n=32&temp=0&autorun=1;
// document.body.dataset.state goes loading → ready → generating → done (or error).
// A model with a chat template opens as a chat (messages, Markdown answers; ?chat=0: a
// completion), one without it as a completion of the prompt.
import { renderMarkdown } from './markdown.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
// ?simd=baseline|relaxed picks the wasm build (default: relaxed SIMD where the browser has
// it); ?threads=N the threads (the Threads control: a new engine worker, same model)
const workerUrl = new URL('./worker.js', import.meta.url);
for (const key of ['simd', 'threads', 'build', 'split']) {
  if (params.has(key)) workerUrl.searchParams.set(key, params.get(key));
}
let worker;

let loaded = false;
let generating = false;
// the engine's sampler defaults (lutra-wasm's sampler_defaults), posted by each new worker
let samplerDefaults = null;
const SAMPLER_INPUTS = [['temperature', 'temp'], ['top_k', 'top_k'], ['top_p', 'top_p'], ['min_p', 'min_p'], ['repeat_penalty', 'repeat_penalty']];
let chatTurns = 0;
const setState = (s) => { document.body.dataset.state = s; };

for (const [key, id] of [['prompt', 'prompt'], ['n', 'n'], ['temp', 'temp'], ['top_k', 'top_k'], ['top_p', 'top_p'], ['min_p', 'min_p'], ['seed', 'seed']]) {
  if (params.has(key)) $(id).value = params.get(key);
}
if (params.has('model')) $('model').value = params.get('model');

function controls() {
  $('generate').disabled = !loaded || generating;
  $('stop').disabled = !generating;
  $('reset').disabled = !loaded || generating || chatTurns === 0;
  $('load').disabled = generating;
  $('file').disabled = generating;
  $('model').disabled = generating;
  $('threads').disabled = generating || !self.crossOriginIsolated;
}

function showError(message) {
  $('error').textContent = message;
  $('error').hidden = false;
}

function status(text, done = 0, total = 0) {
  $('status').textContent = text;
  $('progress').value = total ? done / total : 0;
}

/** The model menu names what is loaded: a preset, or the file(s) from this computer. */
let fileLoad = null;
function showLoaded(message) {
  let own = $('model').querySelector('option[data-file]');
  if (!message.files) {
    own?.remove();
    $('model').value = message.model;
    return;
  }
  fileLoad = message;
  if (!own) {
    own = new Option('', 'file');
    own.dataset.file = '1';
    $('model').add(own);
  }
  own.textContent = `File: ${message.files.map((f) => f.name).join(' + ')}`;
  $('model').value = 'file';
}

let lastLoad = null;
function load(message) {
  // the file option loads its file again; a preset, once loaded, drops it
  if (message.model === 'file') message = fileLoad;
  lastLoad = message;
  setState('loading');
  $('error').hidden = true;
  status('Loading…');
  $('load').disabled = true;
  worker.postMessage(message);
}

/** Chat or completion: which of the conversation and the transcript shows, and how the box is used. */
function showMode() {
  const chat = $('chat').checked;
  $('messages').hidden = !chat;
  $('transcript').hidden = chat;
  $('gen-heading').textContent = chat ? 'Chat' : 'Generate';
  $('prompt-label').textContent = chat ? 'Message' : 'Prompt';
  $('prompt-help').textContent = chat ? 'Enter sends, Shift+Enter starts a new line.' : 'Ctrl+Enter generates.';
  $('generate').textContent = chat ? 'Send' : 'Generate';
}

/** A message of the conversation: the user's as typed, the model's rendered from Markdown. */
function addMessage(role, text) {
  const li = document.createElement('li');
  li.className = `message ${role}`;
  const who = document.createElement('span');
  who.className = 'role';
  who.textContent = role === 'user' ? 'You' : 'Model';
  const body = document.createElement('div');
  body.className = 'body';
  body.textContent = text;
  li.append(who, body);
  $('messages').append(li);
  li.scrollIntoView({ block: 'end' });
  return li;
}

// the answer being written: its text so far (kept in data-text too) and a pending render
let answer = null;
function renderAnswer() {
  if (!answer) return;
  answer.pending = false;
  answer.li.dataset.text = answer.text;
  answer.li.querySelector('.body').replaceChildren(renderMarkdown(answer.text));
}

function generate() {
  const chat = $('chat').checked;
  const prompt = $('prompt').value;
  if (chat) {
    if (!prompt.trim()) return;
    addMessage('user', prompt);
    answer = { li: addMessage('assistant', ''), text: '', pending: false };
    answer.li.setAttribute('aria-busy', 'true');
    $('prompt').value = '';
    chatTurns += 1;
  } else {
    $('output').textContent = '';
    $('echo').textContent = prompt;
    chatTurns = 0;
  }
  generating = true;
  controls();
  setState('generating');
  $('error').hidden = true;
  $('tps').textContent = '…';
  $('stats').textContent = '';
  const num = (id) => Number($(id).value);
  worker.postMessage({
    type: 'generate',
    prompt,
    chat,
    n: num('n'),
    sampler: { temperature: num('temp'), top_k: num('top_k'), top_p: num('top_p'), min_p: num('min_p'), repeat_penalty: num('repeat_penalty'), repeat_last_n: samplerDefaults.repeat_last_n, seed: num('seed') },
  });
}

function onMessage({ data }) {
  switch (data.type) {
    case 'progress': {
      const mib = (b) => (b / 1048576).toFixed(1);
      const amount = data.total > 1e5 ? `${mib(data.done)} of ${mib(data.total)} MiB` : `${data.done} of ${data.total}`;
      status(`${data.phase}: ${amount}`, data.done, data.total);
      break;
    }
    case 'defaults':
      // only fields still empty: URL parameters and the user's edits stay
      samplerDefaults = data.sampler;
      for (const [key, id] of SAMPLER_INPUTS) {
        if ($(id).value === '') $(id).value = String(data.sampler[key]);
      }
      break;
    case 'note':
      $('stats').textContent = data.message;
      break;
    case 'ready':
      loaded = true;
      chatTurns = 0;
      $('messages').replaceChildren();
      $('chat').disabled = !data.chat;
      $('chat').checked = data.chat && params.get('chat') !== '0';
      showMode();
      $('threads').value = String(data.threads);
      showLoaded(lastLoad);
      status(`Ready: ${data.summary}; kernel ${data.isa}; ${data.threads} thread${data.threads > 1 ? 's' : ''}; loaded in ${(data.loadMs / 1000).toFixed(1)} s; wasm memory ${Math.round(data.memory / 1048576)} MiB`, 1, 1);
      if (data.threadNote) $('stats').textContent = data.threadNote;
      setState('ready');
      controls();
      if (params.get('autorun') === '1') {
        params.delete('autorun');
        generate();
      }
      break;
    case 'token': {
      $('tps').textContent = (data.generated / (data.ms / 1000)).toFixed(1);
      if (answer) {
        answer.text += data.text;
        // one render per frame, however many tokens came
        if (!answer.pending) {
          answer.pending = true;
          requestAnimationFrame(renderAnswer);
        }
        break;
      }
      const out = $('output');
      const last = out.lastChild;
      if (last && last.nodeType === Node.TEXT_NODE) last.appendData(data.text);
      else out.append(document.createTextNode(data.text));
      break;
    }
    case 'done': {
      generating = false;
      if (answer) {
        renderAnswer();
        answer.li.setAttribute('aria-busy', 'false');
        answer = null;
      }
      const tps = data.genMs > 0 ? data.generated / (data.genMs / 1000) : 0;
      $('tps').textContent = tps.toFixed(1);
      const reasons = { end: 'end of text', max_tokens: 'token limit', context_full: 'context full', cancelled: 'stopped' };
      $('stats').textContent = `prompt ${data.promptTokens} tokens in ${data.prefillMs.toFixed(0)} ms; ${data.generated} generated; ${reasons[data.reason] || data.reason}; ${data.position} of ${data.context} positions`;
      if (data.reason === 'context_full') showError('The context is full: start a new conversation.');
      controls();
      setState('done');
      break;
    }
    case 'error':
      generating = false;
      answer?.li.setAttribute('aria-busy', 'false');
      answer = null;
      showError(data.during === 'load' ? `Could not load the model: ${data.message}` : data.message);
      if (data.during === 'load') status(loaded ? 'The previous model is still loaded.' : 'No model loaded.');
      setState('error');
      controls();
      break;
    default:
      break;
  }
}

/** A new engine worker (threads from `workerUrl`): the old one, its model and its pool go. */
function startWorker() {
  worker?.terminate();
  loaded = false;
  generating = false;
  worker = new Worker(workerUrl, { type: 'module' });
  worker.onmessage = onMessage;
  worker.onerror = (e) => {
    showError(`The engine stopped: ${e.message}`);
    setState('error');
  };
}

// the Threads control: 1 up to the cores the browser reports (threads need a
// cross-origin-isolated page: SharedArrayBuffer)
const cores = navigator.hardwareConcurrency || 1;
for (let t = 1; t <= Math.max(2, Math.min(cores, 8)); t++) $('threads').add(new Option(`${t}`, String(t)));
$('threads').value = params.get('threads') || String(Math.min(2, cores));
if (!self.crossOriginIsolated) {
  $('threads').disabled = true;
  $('threads').title = 'Threads need a cross-origin-isolated page (COOP/COEP headers)';
}
$('threads').addEventListener('change', () => {
  workerUrl.searchParams.set('threads', $('threads').value);
  startWorker();
  load(lastLoad || { type: 'load', model: $('model').value });
});
startWorker();

$('load').addEventListener('click', () => load({ type: 'load', model: $('model').value }));
$('file').addEventListener('change', () => {
  const files = [...$('file').files];
  if (files.length) load({ type: 'load', files });
});
$('generate').addEventListener('click', generate);
$('prompt').addEventListener('keydown', (e) => {
  if (e.key !== 'Enter' || e.isComposing || $('generate').disabled) return;
  // a chat sends on Enter (Shift+Enter: a new line); a completion on Ctrl+Enter
  if ($('chat').checked ? !e.shiftKey : e.ctrlKey || e.metaKey) {
    e.preventDefault();
    generate();
  }
});
/** A new conversation: the engine's and the page's (after New conversation, or a change of mode). */
function clearConversation() {
  worker.postMessage({ type: 'reset' });
  $('messages').replaceChildren();
  $('output').textContent = '';
  $('echo').textContent = '';
  chatTurns = 0;
  showMode();
  controls();
}
$('chat').addEventListener('change', clearConversation);
$('stop').addEventListener('click', () => worker.postMessage({ type: 'stop' }));
$('reset').addEventListener('click', clearConversation);

load({ type: 'load', model: $('model').value });
