// One reply on one channel: its stats (what window.demo exposes), its player, the frame check,
// the decode diagnostic and a monitor that samples the analyser and the playback position.

import { checkPayload, FrameCounter } from './mp3.js';
import { DecodeCheck, isSilent, MsePlayer, PcmPlayer } from './players.js';

const MONITOR_MS = 10;

export function newStats(name, opts) {
  const t0 = performance.now();
  return {
    channel: name, state: 'connecting', format: opts.format, chunking: opts.chunking, reused: false,
    t0, now: () => Math.round((performance.now() - t0) * 10) / 10,
    ttfbMs: null, firstPlayMs: null, firstSoundMs: null, endedMs: null, ended: false, playResolved: false,
    audioBytes: 0, wireBytes: 0, wireBytesTotal: 0, overheadPct: null, overheadTotalPct: null,
    messages: 0, audioMessages: 0, eventMessages: 0,
    frames: 0, samples: 0, syncPayloads: 0, wholePayloads: 0, skippedBytes: 0,
    mse: { appends: 0, appendsOk: 0, appendErrors: 0, bufferedS: 0, ranges: 0 },
    expectedS: 0, decode: { payloads: 0, failures: 0, singleFrameFailures: 0, decodedSamples: 0, pending: 0, lostSamples: 0, lostPct: 0 },
    gaps: [], levels: [], peakRms: 0, soundMs: 0,
    // the server's `preroll_ms`: latest and largest; what was held when playback started
    prerollMs: 0, prerollMaxMs: 0, startHeldMs: null, startPrerollMs: null, rebuffers: 0,
    // the player's own timeline, for telling where a start's time went: [ms, what, fields]
    // ('preroll' in force, 'held' after each payload, 'play' called, 'playing' heard)
    timeline: [], playCalledMs: null,
    sentences: [], payloads: [], agentText: '', done: null, error: null, errors: [],
    cancel: null, sampleRate: 24000,
    // word timings (`words` events), on the reply's timeline: what plays now, what was heard
    words: [], audioBeforeWords: 0, playedMs: 0, wordNow: -1, wordLog: [], heardText: null,
  };
}

export class Run {
  constructor(name, opts, ctx, graph, onChange) {
    this.stats = newStats(name, opts);
    this.opts = opts;
    this.ctx = ctx;
    this.graph = graph;
    this.onChange = onChange;
    this.bytes = []; // the payloads as received, for tests that check them again in Python
    this.player = null;
    this.frames = opts.format === 'mp3' ? new FrameCounter() : null;
    this.check = null;
    this.monitor = setInterval(() => this.sample(), MONITOR_MS);
  }

  ensurePlayer() {
    if (this.player) return;
    const st = this.stats;
    if (st.format === 'mp3') {
      this.player = new MsePlayer(this.ctx, this.graph, st, st.prerollMs);
      this.check = new DecodeCheck(st.sampleRate);
      st.decode = Object.assign(this.check.result, { lostSamples: 0, lostPct: 0 });
    } else {
      this.player = new PcmPlayer(this.ctx, this.graph, st, st.sampleRate, st.prerollMs);
    }
  }

  event(type, body, wire) {
    const st = this.stats;
    if (type !== 'done') { st.wireBytesTotal += wire; st.messages += 1; st.eventMessages += 1; }
    if (type === 'ready') {
      st.session = body.session;
      st.sampleRate = body.sample_rate;
      st.format = body.format;
      st.state = 'streaming';
      this.preroll(body.preroll_ms);
    } else if (type === 'sentence') {
      if (this.player) this.player.setHeldBack(body.held_back_ms); // before the preroll it is met with
      if (this.player) this.player.setStartIn(body.start_in_ms);
      if (body.start_in_ms !== undefined) st.timeline.push([st.now(), 'start_in', { ms: body.start_in_ms }]);
      this.preroll(body.preroll_ms);
      // `spoken`: what the engine was given for it (absent from older servers)
      st.sentences.push({ index: body.index, text: body.text, spoken: body.spoken, pauseMs: body.pause_ms || 0, arriveMs: st.now(), mediaS: this.mediaSoFar(), playMs: null });
    } else if (type === 'words') {
      for (const w of body.words || []) st.words.push({ ...w, sentence: body.sentence, index: st.words.length });
    } else if (type === 'text') {
      st.agentText += body.delta;
    } else if (type === 'done') {
      this.finish(body);
    } else if (type === 'cancelled') {
      if (st.cancel) Object.assign(st.cancel, { cancelledMs: st.now() - st.cancel.atMs, server: body });
      if (typeof body.heard_text === 'string') st.heardText = body.heard_text;
      this.end('stopped');
    } else if (type === 'error') {
      this.error(body);
    }
    this.onChange();
  }

  /** The server's `preroll_ms` (absent from older servers: 0); the latest one is in force. */
  preroll(ms) {
    const st = this.stats;
    st.prerollMs = Number.isFinite(ms) && ms > 0 ? ms : 0;
    st.prerollMaxMs = Math.max(st.prerollMaxMs, st.prerollMs);
    st.timeline.push([st.now(), 'preroll', { ms: st.prerollMs }]);
    if (this.player) this.player.setPreroll(st.prerollMs);
  }

  overhead(wire) { this.stats.wireBytesTotal += wire; }

  mediaSoFar() {
    const st = this.stats;
    if (this.frames) return this.frames.samples / st.sampleRate;
    return Math.floor(st.audioBytes / 2) / st.sampleRate;
  }

  audio(bytes, meta, wire) {
    const st = this.stats;
    if (st.state === 'stopped') return;
    if (st.ttfbMs === null) st.ttfbMs = st.now();
    st.state = 'streaming';
    this.ensurePlayer();
    if (!st.words.some((w) => w.sentence === meta.sentence)) st.audioBeforeWords += 1;
    const entry = { seq: st.audioMessages, sentence: meta.sentence, bytes: bytes.length, arriveMs: st.now(), mediaS: this.mediaSoFar(), playMs: null };
    st.payloads.push(entry);
    st.messages += 1;
    st.audioMessages += 1;
    st.audioBytes += bytes.length;
    st.wireBytes += wire;
    st.wireBytesTotal += wire;
    this.bytes.push(bytes);
    if (this.frames) {
      const c = checkPayload(bytes);
      Object.assign(entry, { sync: c.sync, whole: c.whole, frames: c.frames });
      st.syncPayloads += c.sync ? 1 : 0;
      st.wholePayloads += c.whole ? 1 : 0;
      this.frames.push(bytes);
      st.frames = this.frames.frames;
      st.samples = this.frames.samples;
      st.skippedBytes = this.frames.skipped;
      this.check.add(bytes, entry, c.whole ? c.frames : 0);
    } else {
      st.samples = Math.floor(st.audioBytes / 2);
    }
    this.player.push(bytes);
    st.timeline.push([st.now(), 'audio', { sentence: meta.sentence, madeMs: Math.round(this.mediaSoFar() * 1000) }]);
    this.overheads();
    this.onChange(true); // frequent: the page renders these at most every 100 ms
  }

  overheads() {
    const st = this.stats;
    st.expectedS = st.samples / st.sampleRate;
    if (!st.audioBytes) return;
    st.overheadPct = Math.round((st.wireBytes / st.audioBytes - 1) * 10000) / 100;
    st.overheadTotalPct = Math.round((st.wireBytesTotal / st.audioBytes - 1) * 10000) / 100;
  }

  finish(done) {
    const st = this.stats;
    st.done = done;
    st.state = 'playing';
    this.overheads();
    if (this.player) this.player.finish();
    else this.end('ended'); // nothing to play
  }

  error(body) {
    this.stats.error = body;
    this.end('error');
  }

  closed() {
    if (!this.stats.done && !this.stats.error && this.stats.state !== 'stopped') this.error({ code: 'closed', message: 'the channel closed before done' });
  }

  /** Barge-in on the client side: stop sound now and keep watching until it is silent. */
  stop() {
    const st = this.stats;
    if (['ended', 'error'].includes(st.state)) return;
    // where playback was (ms on the reply's timeline): sent with `cancel`, and what was heard
    const playedMs = this.player ? Math.round(this.player.mediaTime() * 1000) : 0;
    st.playedMs = playedMs;
    st.cancel = { atMs: st.now(), silentMs: null, cancelledMs: null, playedMs, server: null };
    st.heardText = heardText(st.words, playedMs); // until the server says (WebSocket)
    if (this.player) this.player.stop();
    this.end('stopped');
  }

  end(state) {
    const st = this.stats;
    if (st.state !== 'stopped') st.state = state;
    if (this.player && state !== 'ended') this.player.stop();
  }

  sample() {
    const st = this.stats;
    const rms = this.graph.level();
    const t = st.now();
    st.levels.push([t, Math.round(rms * 1e4) / 1e4]);
    st.peakRms = Math.max(st.peakRms, rms);
    if (!isSilent(rms)) {
      st.soundMs += MONITOR_MS;
      if (st.firstSoundMs === null) st.firstSoundMs = t;
    }
    if (st.cancel && st.cancel.silentMs === null && isSilent(rms)) st.cancel.silentMs = t - st.cancel.atMs;
    if (this.player) { this.player.tick(); this.trackPlayback(t); }
    if (st.decode.pending === 0 && st.done && this.frames) {
      st.decode.lostSamples = st.samples - st.decode.decodedSamples;
      st.decode.lostPct = st.samples ? Math.round((st.decode.lostSamples / st.samples) * 10000) / 100 : 0;
    }
    const quiet = st.cancel ? st.cancel.silentMs !== null : true;
    if ((st.state === 'ended' || st.state === 'error' || st.state === 'stopped') && quiet && st.decode.pending === 0) {
      st.finished = true;
      clearInterval(this.monitor);
      this.onChange();
    }
  }

  trackPlayback(t) {
    const st = this.stats;
    if (st.state === 'stopped') return;
    const pos = this.player.mediaTime();
    this.trackWords(pos * 1000, t);
    for (const list of [st.sentences, st.payloads]) {
      for (const item of list) if (item.playMs === null && pos > item.mediaS) item.playMs = t;
    }
    if (st.ended && st.state === 'playing') { st.state = 'ended'; this.onChange(); }
  }

  /** The word being played: the last one that started at or before `ms`; logged on change. */
  trackWords(ms, t) {
    const st = this.stats;
    st.playedMs = Math.round(ms);
    const now = wordAt(st.words, ms);
    if (now === st.wordNow) return;
    st.wordNow = now;
    if (now >= 0) st.wordLog.push({ index: now, word: st.words[now].word, playedMs: st.playedMs, atMs: t });
    this.onChange();
  }
}

/** Index of the last word in `words` (in order) that started at or before `ms`, or -1. */
export function wordAt(words, ms) {
  let found = -1;
  for (let i = 0; i < words.length && words[i].start_ms <= ms; i++) found = i;
  return found;
}

/** The words that started before `ms`, as the page shows what was heard (before the server's). */
export function heardText(words, ms) {
  return words.filter((w) => w.start_ms < ms).map((w) => w.word).join(' ');
}
