// The two channels. Each turns what arrives into the same calls on a Run: ready, sentence,
// text, audio (bytes, plus what they cost on the wire), done, error, cancelled. Byte counting
// follows the server's rules, so the page's figures can be checked against `done`:
//  - SSE: each event's bytes as received, plus the HTTP/1.1 chunk framing of its one write;
//  - WebSocket: each message's bytes plus its frame header (2, 4 or 10 bytes server to client).

import { authHeaders, wsProtocols } from './auth.js';

const utf8 = new TextEncoder();

function b64bytes(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export const wsFrameOverhead = (n) => (n < 126 ? 2 : n < 65536 ? 4 : 10);
export const chunkFraming = (n) => (n ? n.toString(16).length + 4 : 0);

/** SSE over fetch + a stream reader, not EventSource: it sees the exact bytes and can abort. */
export class SseChannel {
  constructor(run) { this.run = run; this.abort = new AbortController(); }

  async start(opts) {
    const q = new URLSearchParams({ voice: opts.voice, speed: opts.speed, format: opts.format, chunking: opts.chunking });
    if (opts.vocoder) q.set('vocoder', opts.vocoder);
    q.set(opts.prompt ? 'prompt' : 'text', opts.prompt || opts.text);
    let resp;
    try {
      resp = await fetch(`/v1/stream/sse?${q}`, { signal: this.abort.signal, cache: 'no-store', headers: authHeaders() });
    } catch (err) {
      if (err.name !== 'AbortError') this.run.error({ code: 'network', message: String(err) });
      return;
    }
    if (!resp.ok) {
      const body = await resp.json().catch(() => ({}));
      this.run.error(body.error || { code: `http_${resp.status}`, message: resp.statusText });
      return;
    }
    await this.read(resp.body.getReader());
  }

  async read(reader) {
    const dec = new TextDecoder();
    let text = '';
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (err) {
        if (err.name !== 'AbortError') this.run.error({ code: 'network', message: String(err) });
        return;
      }
      if (chunk.done) break;
      text += dec.decode(chunk.value, { stream: true });
      let end;
      while ((end = text.indexOf('\r\n\r\n')) >= 0) {
        const block = text.slice(0, end + 4);
        text = text.slice(end + 4);
        this.event(block);
      }
    }
    this.run.closed();
  }

  event(block) {
    const n = utf8.encode(block).length;
    const wire = n + chunkFraming(n);
    let type = 'message';
    const data = [];
    for (const line of block.split('\r\n')) {
      if (line.startsWith('event:')) type = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (!data.length) { this.run.overhead(wire); return; } // keep-alive ping
    const body = JSON.parse(data.join('\n'));
    if (type === 'audio') this.run.audio(b64bytes(body.data), body, wire);
    else this.run.event(type, body, wire);
  }

  stop() { this.abort.abort(); }
}

/** The unified WebSocket channel: JSON text frames for events and control, binary audio. */
export class WsChannel {
  /**
   * `prev`: the last WsChannel. Its socket is reused when it is open, with the same options,
   * and its barge-in was answered (`cancelled`) or, for a prompt, its turn is over: the server
   * keeps the conversation on that socket, so the next prompt is the next turn.
   */
  constructor(run, prev = null, opts = null) {
    this.run = run;
    this.sentence = 0;
    this.cancelled = false; // the server answered our `cancel`
    this.turnOver = false; // a prompt turn ended (`done`, or an agent error) and the socket stays open
    this.ws = null;
    if (prev && opts && prev.reusable(opts)) this.ws = prev.ws;
    else if (prev && prev.ws && prev.ws.readyState === WebSocket.OPEN) prev.ws.close(1000);
  }

  key(opts) { return JSON.stringify([opts.voice, opts.speed, opts.format, opts.chunking, opts.vocoder]); }

  async start(opts) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
      const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/stream/ws`;
      this.ws = new WebSocket(url, wsProtocols());
      this.ws.binaryType = 'arraybuffer';
      this.ws.optsKey = this.key(opts);
      await new Promise((resolve, reject) => {
        this.ws.onopen = resolve;
        this.ws.onerror = () => reject(new Error('WebSocket connection failed'));
      }).catch((err) => this.run.error({ code: 'network', message: err.message }));
      if (this.ws.readyState !== WebSocket.OPEN) return;
      const start = { type: 'start', voice: opts.voice, speed: Number(opts.speed), format: opts.format, chunking: opts.chunking, envelope: 'json' };
      if (opts.vocoder) start.vocoder = opts.vocoder;
      // the text in `start`: the gateway admits the reply knowing its work, and "Play both"
      // (the same text on SSE) is booked once, as the hub synthesizes it once
      if (!opts.prompt) start.text = opts.text;
      this.send(start);
      this.textSent = !opts.prompt;
    } else {
      this.textSent = false;
      this.run.stats.reused = true; // barge-in left the socket open: the next reply goes on it
    }
    this.ws.onmessage = (m) => this.message(m.data);
    this.ws.onclose = (e) => this.run.closed(e.code);
    this.prompt = !!opts.prompt;
    if (opts.prompt) {
      this.send({ type: 'prompt', prompt: opts.prompt }); // a turn: the socket stays open after `done`
    } else {
      if (!this.textSent) this.send({ type: 'text', text: opts.text });
      this.send({ type: 'end' });
    }
  }

  send(msg) { this.ws.send(JSON.stringify(msg)); }

  message(data) {
    if (data instanceof ArrayBuffer) {
      const bytes = new Uint8Array(data);
      this.run.audio(bytes, { sentence: this.sentence }, bytes.length + wsFrameOverhead(bytes.length));
      return;
    }
    const n = utf8.encode(data).length;
    const body = JSON.parse(data);
    if (body.type === 'sentence') this.sentence = body.index;
    if (body.type === 'cancelled') this.cancelled = true;
    if (this.prompt && (body.type === 'done' || (body.type === 'error' && /^agent_/.test(body.code)))) this.turnOver = true;
    this.run.event(body.type, body, n + wsFrameOverhead(n));
  }

  /**
   * Barge-in: ask the server to stop; the socket stays open for the next reply. `playedMs`, the
   * player's position in the reply, lets the server say what was heard (`cancelled.heard_text`).
   */
  stop(playedMs = null) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.send(Number.isFinite(playedMs) ? { type: 'cancel', played_ms: Math.round(playedMs) } : { type: 'cancel' });
      return true;
    }
    return false;
  }

  reusable(opts) {
    return !!this.ws && this.ws.readyState === WebSocket.OPEN && this.ws.optsKey === this.key(opts)
      && (this.cancelled || (this.turnOver && !!opts.prompt));
  }
}
