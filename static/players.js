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

/** MediaSource `audio/mpeg`: appends whole payloads in order, ends the stream after the last. */
export class MsePlayer {
  constructor(ctx, graph, stats) {
    this.stats = stats;
    this.queue = [];
    this.finished = false;
    this.stopped = false;
    this.sb = null;
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
      if (st.firstPlayMs === null) st.firstPlayMs = st.now();
      if (this.stallAt !== undefined) {
        st.gaps.push({ atMs: this.stallAt, ms: st.now() - this.stallAt });
        this.stallAt = undefined;
      }
    });
    a.addEventListener('waiting', () => {
      // a stall after playback began and before the stream ended is a gap the listener hears
      if (st.firstPlayMs !== null && !this.stopped && this.ms.readyState === 'open') this.stallAt = st.now();
    });
    a.addEventListener('ended', () => { st.ended = true; st.endedMs = st.now(); });
    a.addEventListener('error', () => { st.errors.push(`audio element: ${a.error && a.error.message}`); });
  }

  push(bytes) { this.queue.push(bytes); this.pump(); }

  finish() { this.finished = true; this.pump(); }

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
    if (!this.playCalled && !this.stopped) {
      this.playCalled = true;
      this.audio.play().then(
        () => { this.stats.playResolved = true; },
        (err) => { this.stats.errors.push(`play(): ${err.name}`); },
      );
    }
    this.pump();
  }

  recordBuffered() {
    const r = this.sb.buffered;
    this.stats.mse.ranges = r.length;
    this.stats.mse.bufferedS = r.length ? r.end(r.length - 1) - r.start(0) : 0;
  }

  mediaTime() { return this.audio.currentTime; }

  stop() {
    this.stopped = true;
    this.audio.pause();
    this.node.disconnect();
    if (this.ms.readyState === 'open' && this.sb && !this.sb.updating) this.ms.endOfStream();
    URL.revokeObjectURL(this.url);
  }
}

/** s16le mono PCM over WebAudio: each payload becomes a buffer scheduled right after the last. */
export class PcmPlayer {
  constructor(ctx, graph, stats, sampleRate) {
    this.ctx = ctx;
    this.graph = graph;
    this.stats = stats;
    this.rate = sampleRate;
    this.carry = null; // an odd trailing byte (naive chunking can cut a sample in two)
    this.next = 0;
    this.media = 0; // seconds of audio scheduled so far
    this.chunks = []; // [context time, media time] at each buffer start
    this.sources = new Set();
    this.finished = false;
    this.stopped = false;
  }

  push(bytes) {
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
    this.schedule(buf);
  }

  schedule(buf) {
    const ctx = this.ctx, st = this.stats, now = ctx.currentTime;
    if (!this.chunks.length) {
      this.next = now + 0.03; // a small lead absorbs the jitter of the next payloads
      st.firstPlayMs = st.now() + 30;
      st.playResolved = true;
    } else if (this.next < now) {
      // the previous buffer ran out before this one came: a gap the listener hears
      st.gaps.push({ atMs: st.now() - (now - this.next) * 1000, ms: (now - this.next) * 1000 });
      this.next = now + 0.005;
    }
    const src = ctx.createBufferSource();
    src.buffer = buf;
    src.connect(this.graph.input);
    src.start(this.next);
    this.sources.add(src);
    src.onended = () => {
      this.sources.delete(src);
      if (this.finished && !this.sources.size && !this.stopped) { st.ended = true; st.endedMs = st.now(); }
    };
    this.chunks.push([this.next, this.media]);
    this.next += buf.duration;
    this.media += buf.duration;
  }

  finish() {
    this.finished = true;
    if (!this.sources.size && this.chunks.length) { this.stats.ended = true; this.stats.endedMs = this.stats.now(); }
  }

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
