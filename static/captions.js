// The captions of one channel: one span per sentence, as the server displays it (`text`); once
// its `words` arrive, one span per word in it (karaoke). Under a sentence the engine was given
// other words (`spoken`: numbers, a phone number, a price as said; emoji dropped), or a pause
// before, a smaller line says what it was given.

/** Draw `st`'s sentences into `caps`, and mark the sentence and word playing now. */
export function renderCaptions(caps, st) {
  const spans = caps.getElementsByClassName('s'); // live: the sentences drawn so far
  while (spans.length < st.sentences.length) {
    const s = st.sentences[spans.length];
    const span = document.createElement('span');
    span.className = 's';
    caps.append(span);
    const line = spokenLine(s);
    if (line) caps.append(line);
  }
  st.sentences.forEach((s, i) => {
    const span = spans[i];
    const words = st.words.filter((w) => w.sentence === s.index);
    if (span.dataset.words === String(words.length)) return;
    span.dataset.words = String(words.length);
    span.replaceChildren(...wordNodes(s.text, words));
  });
  let current = -1;
  st.sentences.forEach((s, i) => { if (s.playMs !== null) current = i; });
  const playing = st.state === 'playing' || st.state === 'streaming';
  [...spans].forEach((el, i) => {
    el.classList.toggle('now', playing && i === current);
    el.classList.toggle('said', i < current || (!playing && i <= current));
  });
  for (const el of caps.querySelectorAll('.w')) {
    const k = Number(el.dataset.index);
    el.classList.toggle('now', playing && k === st.wordNow);
    el.classList.toggle('said', k < st.wordNow || (!playing && k === st.wordNow));
  }
}

// the same words but for spacing and the full stop the reader adds at a sentence's end
const plain = (t) => t.replace(/\s+/g, ' ').trim().replace(/[.!?…]+$/, '');

/** A line under sentence `s`: what the engine was given, and the pause before it; null where
 *  it was given what is shown (but for spacing and a closing full stop) without a pause. */
function spokenLine(s) {
  const changed = typeof s.spoken === 'string' && plain(s.spoken) !== plain(s.text);
  const said = [s.pauseMs ? `after a ${Math.round(s.pauseMs)} ms pause` : '', changed ? `spoken: ${s.spoken}` : ''];
  if (!said.some(Boolean)) return null;
  const el = document.createElement('span');
  el.className = 'spoken';
  el.dataset.sentence = String(s.index);
  el.textContent = said.filter(Boolean).join('; ');
  return el;
}

/** `text` with each of `words` (as written, in order) in a span of its own. */
function wordNodes(text, words) {
  const out = [];
  let at = 0;
  for (const w of words) {
    const i = text.indexOf(w.word, at);
    if (i < 0) continue;
    if (i > at) out.push(document.createTextNode(text.slice(at, i)));
    const el = document.createElement('span');
    el.className = 'w';
    el.dataset.index = String(w.index);
    el.textContent = w.word;
    out.push(el);
    at = i + w.word.length;
  }
  out.push(document.createTextNode(`${text.slice(at)} `));
  return out;
}
