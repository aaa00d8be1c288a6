// MPEG audio Layer III frame headers: just enough to check that a payload is whole frames and
// to count frames (and so samples) in a stream, without decoding anything.

const BITRATES = {
  mpeg1: [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],
  mpeg2: [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
};
// indexed by the 2-bit version field: 0 = MPEG-2.5, 2 = MPEG-2, 3 = MPEG-1 (1 is reserved)
const RATES = { 0: [11025, 12000, 8000], 2: [22050, 24000, 16000], 3: [44100, 48000, 32000] };

/** The Layer III header at `off`, or null where there is no valid one. */
export function parseHeader(b, off = 0) {
  if (off + 4 > b.length || b[off] !== 0xff || (b[off + 1] & 0xe0) !== 0xe0) return null;
  const version = (b[off + 1] >> 3) & 3;
  const layer = (b[off + 1] >> 1) & 3;
  const bri = b[off + 2] >> 4;
  const sri = (b[off + 2] >> 2) & 3;
  const pad = (b[off + 2] >> 1) & 1;
  if (version === 1 || layer !== 1 || bri === 0 || bri === 15 || sri === 3) return null;
  const mpeg1 = version === 3;
  const kbps = (mpeg1 ? BITRATES.mpeg1 : BITRATES.mpeg2)[bri];
  const rate = RATES[version][sri];
  const samples = mpeg1 ? 1152 : 576;
  // bytes = samples/8 * bitrate / rate (+1 padding byte): 144*br/sr (MPEG-1), 72*br/sr (MPEG-2)
  const length = Math.floor(((samples / 8) * kbps * 1000) / rate) + pad;
  return { kbps, rate, samples, length };
}

/** Does this payload start on a frame sync, and is it whole frames, ending on a frame end? */
export function checkPayload(b) {
  let off = 0;
  let frames = 0;
  let samples = 0;
  const sync = parseHeader(b, 0) !== null;
  while (off < b.length) {
    const h = parseHeader(b, off);
    if (!h || off + h.length > b.length) break;
    off += h.length;
    frames += 1;
    samples += h.samples;
  }
  return { sync, whole: sync && off === b.length, frames, samples };
}

function id3Size(b) {
  // "ID3" tag: 10-byte header with a syncsafe 28-bit size
  if (b.length < 10 || b[0] !== 0x49 || b[1] !== 0x44 || b[2] !== 0x33) return 0;
  return 10 + ((b[6] & 0x7f) << 21 | (b[7] & 0x7f) << 14 | (b[8] & 0x7f) << 7 | (b[9] & 0x7f));
}

/** Counts the whole frames of a continuous stream fed in arbitrary slices (naive chunking too). */
export class FrameCounter {
  constructor() {
    this.pending = new Uint8Array(0);
    this.frames = 0;
    this.samples = 0;
    this.skipped = 0; // bytes that were not part of any frame (desync): should stay 0
    this.started = false;
  }

  push(bytes) {
    const b = new Uint8Array(this.pending.length + bytes.length);
    b.set(this.pending);
    b.set(bytes, this.pending.length);
    let off = 0;
    if (!this.started) {
      if (b.length < 10) { this.pending = b; return; }
      off = id3Size(b);
      this.started = true;
    }
    while (off + 4 <= b.length) {
      const h = parseHeader(b, off);
      if (!h) { off += 1; this.skipped += 1; continue; }
      if (off + h.length > b.length) break;
      off += h.length;
      this.frames += 1;
      this.samples += h.samples;
    }
    this.pending = b.slice(off);
  }
}
