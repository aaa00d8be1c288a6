// The demo page: one request played over the SSE channel and the WebSocket channel, side by
// side or one at a time, with live per-channel figures, captions and a timeline.
// Everything the page measures is on `window.demo` (plain objects) for tests to read.

import { authHeaders, loadToken, setToken } from './auth.js';
import { renderCaptions } from './captions.js';
import { SseChannel, WsChannel } from './channels.js';
import { Graph } from './players.js';
import { Run } from './run.js';
import { SAMPLES } from './samples.js';
import { drawTimeline } from './timeline.js';

const $ = (sel, root = document) => root.querySelector(sel);
const CHANNELS = ['sse', 'ws'];
const MSE_MP3 = !!(window.MediaSource && MediaSource.isTypeSupported('audio/mpeg'));

const demo = {
  supported: { mseMp3: MSE_MP3 },
  channels: { sse: null, ws: null }, // the stats of each channel's latest run
  runs: { sse: null, ws: null },
  transports: { sse: null, ws: null },
  ctx: null,
  graphs: {},
  ready: false,
  agent: null, // who answers prompts: {backend, label} from /readyz
  turns: [], // the conversation: {prompt, run, fresh} per prompt, fresh when a new socket began it
  newConversation,
  options,
  play,
  stop,
  payloadsBase64,
};
window.demo = demo;

function options() {
  const naive = $('#naive').checked;
  let format = $('#format').value;
  if (format === 'mp3' && !MSE_MP3) format = 'pcm'; // no MSE audio/mpeg (Firefox): PCM over WebAudio
  const prompt = $('input[name=input]:checked').value === 'prompt';
  return {
    text: prompt ? '' : $('#text').value,
    prompt: prompt ? $('#prompt').value : '',
    voice: $('#voice').value,
    speed: $('#speed').value,
    format,
    chunking: naive ? `bytes:${Math.max(1, Number($('#naive-bytes').value) || 1000)}` : 'frames',
    vocoder: $('#vocoder-label').hidden ? '' : $('#vocoder').value,
  };
}

function audioContext() {
  if (!demo.ctx) {
    demo.ctx = new AudioContext({ latencyHint: 'interactive' });
    for (const name of CHANNELS) {
      demo.graphs[name] = new Graph(demo.ctx);
      demo.graphs[name].setMuted($(`#panel-${name} .mute`).checked);
    }
  }
  if (demo.ctx.state !== 'running') demo.ctx.resume();
  return demo.ctx;
}

/** Start one reply on `which` ('both', 'sse' or 'ws'); resolves once the requests are sent. */
async function play(which = 'both') {
  stop();
  const opts = options();
  const ctx = audioContext();
  const names = which === 'both' ? CHANNELS : [which];
  for (const name of CHANNELS) if (!names.includes(name)) { demo.channels[name] = null; demo.runs[name] = null; }
  $('#notice').textContent = $('#format').value === 'mp3' && !MSE_MP3
    ? 'This browser has no MediaSource audio/mpeg: playing PCM over WebAudio instead.' : '';
  const prevWs = demo.transports.ws;
  const starts = names.map((name) => {
    const run = new Run(name, opts, ctx, demo.graphs[name], schedule);
    demo.runs[name] = run;
    demo.channels[name] = run.stats;
    const transport = name === 'sse' ? new SseChannel(run) : new WsChannel(run, demo.transports.ws, opts);
    demo.transports[name] = transport;
    return transport.start(opts);
  });
  if (opts.prompt) { // the conversation is the WebSocket's when it plays (SSE answers each prompt alone)
    const ws = names.includes('ws');
    const fresh = !ws || !(prevWs && demo.transports.ws.ws && demo.transports.ws.ws === prevWs.ws);
    demo.turns.push({ prompt: opts.prompt, run: demo.runs[ws ? 'ws' : 'sse'], fresh });
  }
  schedule();
  await Promise.all(starts.map((p) => Promise.race([p, new Promise((r) => setTimeout(r, 50))])));
}

/** Stop button: barge-in. Cancels on the WebSocket, aborts SSE, and silences both at once. */
function stop() {
  for (const name of CHANNELS) {
    const run = demo.runs[name];
    if (!run || run.stats.finished) continue;
    const live = ['connecting', 'streaming', 'playing'].includes(run.stats.state);
    if (!live) continue;
    run.stop();
    const t = demo.transports[name];
    if (t) run.stats.cancelSent = t.stop(run.stats.cancel ? run.stats.cancel.playedMs : null);
  }
  schedule();
}

/** Forget the earlier turns: close the WebSocket; the next prompt opens a new one. */
function newConversation() {
  stop();
  const t = demo.transports.ws;
  if (t && t.ws && t.ws.readyState === WebSocket.OPEN) t.ws.close(1000);
  demo.transports.ws = null;
  demo.turns = [];
  schedule();
}

function payloadsBase64(name) {
  const run = demo.runs[name];
  if (!run) return [];
  return run.bytes.map((b) => {
    let s = '';
    for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode(...b.subarray(i, i + 0x8000));
    return btoa(s);
  });
}

// -- rendering ------------------------------------------------------------------------------
const fmtMs = (v) => (v === null || v === undefined ? '–' : `${Math.round(v)} ms`);
const pct = (v) => (v === null || v === undefined ? '–' : `${v >= 0 ? '+' : ''}${v.toFixed(1)}%`);
const num = (n) => Math.round(n).toLocaleString('en-US');
const kb = (n) => (n >= 10000 ? `${(n / 1000).toFixed(1)} kB` : `${n} B`);

/** e.g. "1,240 ms asked, 1,300 ms held at start": the server's preroll and what the player held. */
function prerollText(s) {
  if (s.startHeldMs === null) return `${num(s.prerollMs)} ms asked, not started`;
  const later = s.prerollMs !== s.startPrerollMs || s.prerollMaxMs !== s.startPrerollMs
    ? ` (latest ${num(s.prerollMs)}, at most ${num(s.prerollMaxMs)})` : '';
  const again = s.rebuffers ? `; held again ${s.rebuffers}×` : '';
  return `${num(s.startPrerollMs)} ms asked, ${num(s.startHeldMs)} ms held at start${later}${again}`;
}

const ROWS = {
  ttfb: (s) => `${fmtMs(s.ttfbMs)}${s.done && s.done.ttfb_ms != null ? ` (server ${Math.round(s.done.ttfb_ms)} ms)` : ''}`,
  play: (s) => fmtMs(s.firstPlayMs),
  sound: (s) => fmtMs(s.firstSoundMs),
  bytes: (s) => `${kb(s.wireBytes)} on the wire for ${kb(s.audioBytes)} of audio: ${pct(s.overheadPct)}`,
  total: (s) => `${kb(s.wireBytesTotal)}: ${pct(s.overheadTotalPct)}`,
  server: (s) => (s.done ? `${kb(s.done.wire_bytes)} / ${kb(s.done.audio_bytes)}: ${pct((s.done.wire_bytes / s.done.audio_bytes - 1) * 100)}` : '–'),
  messages: (s) => `${s.messages} (${s.audioMessages} audio, ${s.eventMessages} events)`,
  aligned: (s) => (s.format === 'mp3' ? `${s.wholePayloads}/${s.audioMessages} whole frames, ${s.syncPayloads} start on a sync; ${s.frames} frames` : 'pcm: whole samples'),
  mse: (s) => (s.format === 'mp3'
    ? `${s.mse.appendsOk}/${s.mse.appends} appends, ${s.mse.appendErrors} errors; ${s.mse.bufferedS.toFixed(3)} s buffered of ${s.expectedS.toFixed(3)} s`
    : 'WebAudio (PCM)'),
  decode: (s) => (s.format === 'mp3'
    ? `${s.decode.failures} failures in ${s.decode.payloads} payloads${s.decode.singleFrameFailures ? ` (${s.decode.singleFrameFailures} of one whole frame: too short to probe)` : ''}; ${s.decode.lostSamples} samples lost (${s.decode.lostPct}%)`
    : '–'),
  preroll: (s) => prerollText(s),
  gaps: (s) => `${s.gaps.length} (${Math.round(s.gaps.reduce((a, g) => a + g.ms, 0))} ms)`,
  state: (s) => `${s.state}${s.reused ? ' (same socket)' : ''}${s.cancel ? `; silent ${fmtMs(s.cancel.silentMs)} after stop` : ''}${s.error ? `: ${s.error.code} ${s.error.message}` : ''}`,
};

// figures that show damage are marked, so a naive-chunking run stands out at a glance
const BAD = {
  aligned: (s) => s.format === 'mp3' && s.wholePayloads < s.audioMessages,
  mse: (s) => s.mse.appendErrors > 0 || s.mse.ranges > 1,
  decode: (s) => s.decode.failures > s.decode.singleFrameFailures || s.decode.lostSamples > s.decode.singleFrameFailures * 576,
  gaps: (s) => s.gaps.length > 0,
  state: (s) => !!s.error,
};

function renderPanel(name) {
  const panel = $(`#panel-${name}`);
  const st = demo.channels[name];
  panel.classList.toggle('idle', !st);
  for (const cell of panel.querySelectorAll('[data-stat]')) {
    const key = cell.dataset.stat;
    cell.textContent = st ? ROWS[key](st) : '–';
    cell.classList.toggle('bad', !!(st && BAD[key] && BAD[key](st)));
  }
  const caps = $('.captions', panel);
  if (!st) { caps.replaceChildren(); $('.agent', panel).textContent = ''; $('.heard', panel).textContent = ''; return; }
  renderCaptions(caps, st);
  $('.agent', panel).textContent = st.agentText;
  $('.heard', panel).textContent = st.cancel && st.heardText !== null
    ? `Heard before Stop (${num(st.cancel.playedMs)} ms${st.cancel.server && typeof st.cancel.server.heard_text === 'string' ? ', as the server counts it' : ''}): ${st.heardText || '(nothing)'}` : '';
}

const OUTCOME = { stopped: 'stopped: kept as far as it was spoken', error: 'failed' };

function renderConversation() {
  const list = $('#turns');
  while (list.children.length > demo.turns.length) list.lastChild.remove();
  demo.turns.forEach((turn, i) => {
    let li = list.children[i];
    if (!li) {
      li = document.createElement('li');
      li.innerHTML = '<div><span class="who">You:</span><span class="q"></span></div><div><span class="who a"></span><span class="r"></span><span class="outcome"></span></div>';
      list.append(li);
    }
    const st = turn.run.stats;
    li.classList.toggle('fresh', turn.fresh);
    li.title = turn.fresh ? 'a new WebSocket: the conversation starts here' : '';
    $('.q', li).textContent = turn.prompt;
    $('.a', li).textContent = `${demo.agent ? demo.agent.label : 'agent'}:`;
    $('.r', li).textContent = st.agentText || '…';
    const outcome = st.error ? `${OUTCOME.error}: ${st.error.code}` : OUTCOME[st.state] || '';
    $('.outcome', li).textContent = outcome;
  });
}

// Rendering is CPU the engine does not get when the browser runs beside the gateway (the
// project's 2-core machine): a render at every payload and 10 a second while waiting for audio
// took headless Chromium 0.32-0.39 cores while the first sentences were made (0.10-0.12 now). So
// audio payloads (`frequent`) render at most once per RENDER_MS, other events on the next frame,
// and the periodic render (the level lane, the karaoke) runs only while a channel plays.
const RENDER_MS = 100;
let frame = false; // a render is booked for the next animation frame
let deferred = null; // or a timer books one later
let renderedAt = -Infinity;
function schedule(frequent = false) {
  if (frame) return;
  if (frequent && performance.now() - renderedAt < RENDER_MS) {
    deferred ??= setTimeout(() => { deferred = null; schedule(); }, renderedAt + RENDER_MS - performance.now());
    return;
  }
  clearTimeout(deferred);
  deferred = null;
  frame = true;
  requestAnimationFrame(() => {
    frame = false;
    renderedAt = performance.now();
    for (const name of CHANNELS) renderPanel(name);
    renderConversation();
    drawTimeline($('#timeline'), CHANNELS.map((n) => demo.channels[n]).filter(Boolean));
    const playing = CHANNELS.some((n) => { const s = demo.channels[n]; return s && !s.finished && (s.firstPlayMs !== null || s.cancel); });
    if (playing) schedule(true);
  });
}

// -- wiring ---------------------------------------------------------------------------------
async function loadVoices() {
  const sel = $('#voice');
  try {
    const resp = await fetch('/v1/voices', { headers: authHeaders() });
    const body = await resp.json();
    if (resp.status === 401 || resp.status === 403) { // a protected gateway: ask for a browser token
      $('#token-label').hidden = false;
      $('#notice').textContent = `This gateway needs a token (${body.error ? body.error.code : resp.status}): paste one, or open the page as /#token=...`;
      return;
    }
    // one group per language, in the order the server lists them
    const names = new Intl.DisplayNames(['en'], { type: 'language' });
    const groups = new Map();
    for (const v of body.voices) {
      if (!groups.has(v.language)) {
        const g = document.createElement('optgroup');
        g.label = `${names.of(v.language)} (${v.language})`;
        groups.set(v.language, g);
      }
      const o = document.createElement('option');
      o.value = v.id;
      o.textContent = `${v.name || v.id} (${v.id}, ${v.gender}${v.grade ? `, ${v.grade}` : ''})`;
      o.selected = v.id === body.default;
      groups.get(v.language).append(o);
    }
    sel.replaceChildren(...groups.values());
    $('#engine').textContent = body.engine;
  } catch (err) {
    $('#notice').textContent = `Could not load voices: ${err}`;
  }
  try { // the vocoder choice only where the engine streams inside a sentence
    const ready = await (await fetch('/readyz', { headers: authHeaders() })).json();
    const vocoder = ready.vocoder;
    if (ready.agent) { // who answers `prompt`: the simulated stand-in, or the model's name
      demo.agent = ready.agent;
      $('#agent-name').textContent = ready.agent.backend === 'simulated' ? '(simulated: canned replies, no model)' : `(${ready.agent.label}, ${ready.agent.backend})`;
    }
    if (vocoder && vocoder.mode !== 'off') {
      $('#vocoder-label').hidden = false;
      $('#vocoder option[value=""]').textContent = `server default (${vocoder.mode})`;
    }
  } catch { /* readiness is shown elsewhere */ }
}

function wire() {
  for (const name of CHANNELS) $(`#panel-${name}`).append($('#panel-body').content.cloneNode(true));
  $('#play-both').addEventListener('click', () => play('both'));
  $('#play-sse').addEventListener('click', () => play('sse'));
  $('#play-ws').addEventListener('click', () => play('ws'));
  $('#stop').addEventListener('click', () => stop());
  $('#new-conversation').addEventListener('click', () => newConversation());
  $('#sample').addEventListener('change', (e) => useSample(e.target.value));
  $('#speed').addEventListener('input', () => { $('#speed-out').textContent = `${Number($('#speed').value).toFixed(2)}×`; });
  for (const radio of document.querySelectorAll('input[name=input]')) {
    radio.addEventListener('change', () => document.body.classList.toggle('prompt-mode', radio.value === 'prompt' && radio.checked));
  }
  for (const name of CHANNELS) {
    $(`#panel-${name} .mute`).addEventListener('change', (e) => demo.graphs[name] && demo.graphs[name].setMuted(e.target.checked));
  }
  if (!MSE_MP3) $('#notice').textContent = 'No MediaSource audio/mpeg here: MP3 requests play as PCM over WebAudio.';
  window.addEventListener('resize', () => schedule());
  $('#token').addEventListener('change', (e) => { setToken(e.target.value); $('#notice').textContent = ''; loadVoices(); });
}

/** The "Sample" menu: its text in the box (the box's first text for "plain"), to be spoken. */
function useSample(name) {
  const box = $('#text');
  box.value = SAMPLES[name] ?? box.defaultValue;
  box.rows = Math.min(10, Math.max(3, box.value.split('\n').length));
  $('input[name=input][value=text]').checked = true;
  document.body.classList.remove('prompt-mode');
}

const initialToken = loadToken();
if (initialToken) { $('#token-label').hidden = false; $('#token').value = initialToken; }
wire();
loadVoices().then(() => { demo.ready = true; schedule(); });
