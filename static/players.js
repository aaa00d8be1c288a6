// Players. MP3 is one continuous stream (one encoder per utterance), so it is played through
// MediaSource, which parses frames across appends and plays them gaplessly. Decoding slices of
// that stream one by one (decodeAudioData per payload) adds silence and loses samples: that is
// done only in DecodeCheck, the diagnostic that shows the damage. PCM is played with WebAudio.

const SILENCE_RMS = 0.003;

/** analyser -> mute gain -> speakers; the analyser hears what plays, muted or not. */
export class Graph {
  constructor(ctx) {
    this.ctx = ctx;
    this.analyser = ctx.createAnalyser();
    this.analyser.fftSize = 1024;
    this.gain = ctx.createGain();
    this.analyser.connect(this.gain).connect(ctx.destination);
    this.input = this.analyser;
    this.buf = new Float32Array(this.analyser.fftSize);
  }

  level() {
    this.analyser.getFloatTimeDomainData(this.buf);
    let sum = 0;
    for (const v of this.buf) sum += v * v;
    return Math.sqrt(sum / this.buf.length);
  }

  setMuted(muted) { this.gain.gain.value = muted ? 0 : 1; }
}

export const isSilent = (rms) => rms < SILENCE_RMS;

/**
 * Holding back playback. The server says how much audio to hold (`preroll_ms`) before playback
 * starts, or resumes after running dry, so that it will not run dry again; 0 when the engine
 * keeps ahead. After running dry the players also wait for RESUME_S at least, so that one
 * payload at a time does not make them flap between playing and waiting. The MediaSource player
 * pauses itself DRY_S before the end of what it holds: Chromium's renderer underflows with about
 * 30 ms left, and after an underflow it wants several hundred ms more before it plays again.
 */
const DRY_S = 0.06; // ahead of the playhead: pause here, before Chromium's renderer underflows
const RESUME_S = 0.1;
// The gateway sends the next sentence's `preroll_ms` right after a segment's last audio, measured
// on that segment: a player whose hold that audio met waits this long for it before it plays.
const GRACE_MS = 30;

/**
 * The `sentence` event's `held_back_ms`: audio the server made that its encoder still holds (MP3:
 * LAME's look-ahead, 80-127 ms at 24 kHz) until the next audio is encoded. `preroll_ms` counts the
 * audio made, so a player waiting at the end of a segment counts that too: without it, a hold of
 * exactly the audio made so far is met only once the next segment's audio comes (for a segment
 * made whole, its whole synthesis later). It stands until the next payload, which carries it.
 */
const heldBack = (ms) => (Number.isFinite(ms) && ms > 0 ? ms / 1000 : 0);

/**
 * A `sentence`'s `start_in_ms` (absent: none; each `sentence` replaces the last): a player that has
 * not begun and holds some audio starts that long after the event even below `preroll_ms`. The hold
 * is met only when a payload comes, and with segments made whole the next one can come a segment's
 * synthesis after the moment the gateway forecast every later payload to be in time from.
 */
function clockStart(player, ms) {
  clearTimeout(player.startTimer);
  player.startAt = Number.isFinite(ms) && ms >= 0 ? performance.now() + ms : undefined;
  if (player.startAt !== undefined) player.startTimer = setTimeout(() => player.kick(), ms);
}

/** The clock start is due: the player has not begun and its `start_in_ms` has passed. */
const clockDue = (player, begun) => !begun && player.startAt !== undefined && performance.now() >= player.startAt - 1;

/** True once `GRACE_MS` have passed since the hold was first met; schedules `again` meanwhile. */
function graced(player, again) {
  const now = performance.now();
  if (player.metAt === undefined) {
    player.metAt = now;
    setTimeout(again, GRACE_MS);
    return false;
  }
  return now - player.metAt >= GRACE_MS - 1;
}

/**
 * MediaSource `audio/mpeg`: appends whole payloads in order, ends the stream after the last.
 * Plays once it holds the preroll in force; pauses itself when about to run dry, until it does again.
 */
export class MsePlayer {
  constructor(ctx, graph, stats, prerollMs = 0) {
    this.stats = stats;
    this.queue = [];
    this.finished = false;
    this.stopped = false;
    this.sb = null;
    this.prerollS = prerollMs / 1000;
    this.heldBackS = 0; // made by the server, not yet in the stream (`held_back_ms`)
    this.began = false; // play() was called once
    this.holding = true; // paused by us, waiting for audio to hold
    this.resuming = false; // play() called, `playing` not yet seen
    this.audio = new Audio();
    this.ms = new MediaSource();
    this.url = URL.createObjectURL(this.ms);
    this.audio.src = this.url;
    this.node = ctx.createMediaElementSource(this.audio);
    this.node.connect(graph.input);
    this.ms.addEventListener('sourceopen', () => this.open(), { once: true });
    this.watch();
  }

  open() {
    this.sb = this.ms.addSourceBuffer('audio/mpeg');
    this.sb.mode = 'sequence'; // MP3 carries no timestamps: each append follows the last
    this.sb.addEventListener('updateend', () => { this.stats.mse.appendsOk += 1; this.afterAppend(); });
    this.sb.addEventListener('error', () => { this.stats.mse.appendErrors += 1; });
    this.pump();
  }

  watch() {
    const a = this.audio, st = this.stats;
    a.addEventListener('playing', () => {
      this.resuming = false;
      st.timeline.push([st.now(), 'playing', { aheadMs: Math.round(this.ahead() * 1000) }]);
      if (st.firstPlayMs === null) st.firstPlayMs = st.now();
      if (this.stallAt !== undefined) {
        st.gaps.push({ atMs: this.stallAt, ms: st.now() - this.stallAt });
        this.stallAt = undefined;
      }
    });
    a.addEventListener('waiting', () => {
      // a stall after playback began and before the stream ended is a gap the listener hears
      if (this.playing() && this.ms.readyState === 'open') this.dry();
    });
    a.addEventListener('ended', () => { st.ended = true; st.endedMs = st.now(); });
    a.addEventListener('error', () => { st.errors.push(`audio element: ${a.error && a.error.message}`); });
  }

  /** Playback began (the element said `playing` once) and was not stopped. */
  playing() { return this.stats.firstPlayMs !== null && !this.stopped; }

  setPreroll(ms) { this.prerollS = ms / 1000; this.resume(); }

  setStartIn(ms) { clockStart(this, ms); }

  kick() { this.resume(); }

  setHeldBack(ms) { this.heldBackS = heldBack(ms); }

  push(bytes) { this.heldBackS = 0; this.queue.push(bytes); this.pump(); }

  finish() { this.finished = true; this.pump(); this.resume(); }

  pump() {
    if (!this.sb || this.sb.updating || this.stopped) return;
    if (this.queue.length) {
      try {
        this.sb.appendBuffer(this.queue.shift());
        this.stats.mse.appends += 1;
      } catch (err) {
        this.stats.mse.appendErrors += 1;
        this.stats.errors.push(`appendBuffer: ${err.name}`);
      }
      return;
    }
    if (this.finished && this.ms.readyState === 'open') {
      this.recordBuffered();
      this.ms.endOfStream();
    }
  }

  afterAppend() {
    this.recordBuffered();
    if (this.holding) this.stats.timeline.push([this.stats.now(), 'held', { aheadMs: Math.round(this.ahead() * 1000) }]);
    this.resume();
    this.pump();
  }

  /** Seconds of audio buffered ahead of the playhead. */
  ahead() {
    const r = this.sb ? this.sb.buffered : null;
    return r && r.length ? Math.max(0, r.end(r.length - 1) - this.audio.currentTime) : 0;
  }

  /** Play once enough is held: the preroll in force (at least RESUME_S after running dry). */
  resume() {
    if (!this.holding || this.stopped || !this.sb) return;
    const ahead = this.ahead();
    const need = this.began ? Math.max(this.prerollS, RESUME_S) : this.prerollS;
    const all = this.finished && !this.queue.length && !this.sb.updating; // nothing more to come
    const clock = ahead > 0 && clockDue(this, this.began);
    if (!all && !clock && (ahead + this.heldBackS < need || ahead === 0)) { this.metAt = undefined; return; }
    if (!all && !clock && !graced(this, () => this.resume())) return;
    this.metAt = undefined;
    this.holding = false;
    if (!this.began) this.started(ahead);
    this.stats.timeline.push([this.stats.now(), 'play', { aheadMs: Math.round(ahead * 1000), needMs: Math.round(need * 1000), heldBackMs: Math.round(this.heldBackS * 1000), clock }]);
    this.resuming = true; // until `playing`: the element may still wait for more on its own
    this.audio.play().then(
      () => { this.stats.playResolved = true; },
      (err) => { if (err.name !== 'AbortError') this.stats.errors.push(`play(): ${err.name}`); },
    );
  }

  started(ahead) {
    const st = this.stats;
    this.began = true;
    st.startHeldMs = Math.round(ahead * 1000);
    st.startPrerollMs = Math.round(this.prerollS * 1000);
    st.playCalledMs = st.now();
  }

  /** Ran dry after playback began: count the gap, and unless the stream is over, hold again. */
  dry() {
    const st = this.stats;
    if (this.stallAt === undefined) {
      this.stallAt = st.now();
      st.rebuffers += 1;
    }
    if (this.finished || this.holding || this.resuming) return;
    this.holding = true;
    this.audio.pause();
  }

  /** Called every few ms: pause before the element stalls on its own, between two payloads. */
  tick() {
    if (this.playing() && !this.holding && !this.finished && this.ahead() < DRY_S) this.dry();
  }

  recordBuffered() {
    const r = this.sb.buffered;
    this.stats.mse.ranges = r.length;
    this.stats.mse.bufferedS = r.length ? r.end(r.length - 1) - r.start(0) : 0;
  }

  mediaTime() { return this.audio.currentTime; }

  stop() {
    this.stopped = true;
    clearTimeout(this.startTimer);
    this.audio.pause();
    this.node.disconnect();
    if (this.ms.readyState === 'open' && this.sb && !this.sb.updating) this.ms.endOfStream();
    URL.revokeObjectURL(this.url);
  }
}

/**
 * s16le mono PCM over WebAudio: each payload becomes a buffer scheduled right after the last.
 * Buffers are held (not scheduled) until the preroll in force is queued: before the first, and
 * again when one arrives after the scheduled audio ran out.
 */
export class PcmPlayer {
  constructor(ctx, graph, stats, sampleRate, prerollMs = 0) {
    this.ctx = ctx;
    this.graph = graph;
    this.stats = stats;
    this.rate = sampleRate;
    this.carry = null; // an odd trailing byte (naive chunking can cut a sample in two)
    this.prerollS = prerollMs / 1000;
    this.heldBackS = 0; // made by the server, not yet sent (`held_back_ms`: a resampler's few ms)
    this.held = []; // buffers not yet scheduled
    this.heldS = 0;
    this.next = 0;
    this.media = 0; // seconds of audio scheduled so far
    this.chunks = []; // [context time, media time] at each buffer start
    this.sources = new Set();
    this.finished = false;
    this.stopped = false;
  }

  setPreroll(ms) { this.prerollS = ms / 1000; this.drain(); }

  setStartIn(ms) { clockStart(this, ms); }

  kick() { this.drain(); }

  setHeldBack(ms) { this.heldBackS = heldBack(ms); }

  push(bytes) {
    this.heldBackS = 0;
    if (this.stopped) return;
    if (this.carry) {
      const joined = new Uint8Array(bytes.length + 1);
      joined[0] = this.carry[0];
      joined.set(bytes, 1);
      bytes = joined;
    }
    const n = bytes.length >> 1;
    this.carry = bytes.length & 1 ? bytes.slice(-1) : null;
    if (!n) return;
    const buf = this.ctx.createBuffer(1, n, this.rate);
    const ch = buf.getChannelData(0);
    const view = new DataView(bytes.buffer, bytes.byteOffset, n * 2);
    for (let i = 0; i < n; i++) ch[i] = view.getInt16(i * 2, true) / 32768;
    this.held.push(buf);
    this.heldS += buf.duration;
    this.drain();
  }

  /** Schedule what is held, unless playback has not begun or ran out and too little is held. */
  drain() {
    if (this.stopped || !this.held.length) return;
    const now = this.ctx.currentTime;
    const idle = !this.chunks.length || this.next < now;
    const need = this.chunks.length ? Math.max(this.prerollS, RESUME_S) : this.prerollS;
    const clock = clockDue(this, this.chunks.length > 0);
    if (idle && !this.finished && !clock && this.heldS + this.heldBackS < need) { this.metAt = undefined; return; }
    if (idle && !this.finished && !clock && !graced(this, () => this.drain())) return;
    this.metAt = undefined;
    if (!this.chunks.length) this.begin(now);
    else if (idle) this.rebuffered(now);
    for (const buf of this.held) this.schedule(buf);
    this.held = [];
    this.heldS = 0;
  }

  begin(now) {
    const st = this.stats;
    st.playCalledMs = st.now();
    st.timeline.push([st.now(), 'play', { aheadMs: Math.round(this.heldS * 1000), needMs: Math.round(this.prerollS * 1000) }]);
    this.next = now + 0.03; // a small lead absorbs the jitter of the next payloads
    st.firstPlayMs = st.now() + 30;
    st.playResolved = true;
    st.startHeldMs = Math.round(this.heldS * 1000);
    st.startPrerollMs = Math.round(this.prerollS * 1000);
  }

  /** The scheduled audio ran out before this: a gap the listener hears, from then until now. */
  rebuffered(now) {
    const st = this.stats;
    st.gaps.push({ atMs: st.now() - (now - this.next) * 1000, ms: (now - this.next) * 1000 });
    st.rebuffers += 1;
    this.next = now + 0.005;
  }

  schedule(buf) {
    const st = this.stats;
    const src = this.ctx.createBufferSource();
    src.buffer = buf;
    src.connect(this.graph.input);
    src.start(this.next);
    this.sources.add(src);
    src.onended = () => {
      this.sources.delete(src);
      if (this.finished && !this.sources.size && !this.held.length && !this.stopped) { st.ended = true; st.endedMs = st.now(); }
    };
    this.chunks.push([this.next, this.media]);
    this.next += buf.duration;
    this.media += buf.duration;
  }

  finish() {
    this.finished = true;
    this.drain();
    if (!this.sources.size && this.chunks.length) { this.stats.ended = true; this.stats.endedMs = this.stats.now(); }
  }

  tick() {} // nothing to watch: buffers are scheduled when they arrive

  mediaTime() {
    const now = this.ctx.currentTime;
    let t = 0;
    for (const [at, media] of this.chunks) {
      if (at > now) break;
      t = media + (now - at);
    }
    return Math.min(t, this.media);
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.startTimer);
    this.held = [];
    for (const src of this.sources) src.stop();
    this.sources.clear();
  }
}

/** The diagnostic: decode each MP3 payload on its own and count failures and lost samples. */
export class DecodeCheck {
  constructor(sampleRate) {
    // decoding at the stream's own rate, so lengths are source samples (no resampling)
    this.ctx = new OfflineAudioContext(1, 1, sampleRate);
    this.chain = Promise.resolve();
    this.result = { payloads: 0, failures: 0, singleFrameFailures: 0, decodedSamples: 0, pending: 0 };
  }

  /** Decode `bytes` alone; `entry` (the payload's log entry) gets `decoded`: samples, or -1. */
  add(bytes, entry, frames) {
    const r = this.result;
    r.pending += 1;
    const copy = bytes.slice().buffer; // decodeAudioData detaches its input
    this.chain = this.chain.then(() => this.ctx.decodeAudioData(copy)).then(
      (buf) => { r.payloads += 1; r.decodedSamples += buf.length; entry.decoded = buf.length; r.pending -= 1; },
      () => {
        r.payloads += 1;
        r.failures += 1;
        // whole single frames fail too: Chromium's demuxer will not probe a stream from one frame
        if (frames === 1) r.singleFrameFailures += 1;
        entry.decoded = -1;
        r.pending -= 1;
      },
    );
  }
}
