// The timeline: for each channel, when each sentence and audio payload arrived (upper lane) and
// when it played (lower lane, over the analyser's level), with gaps in red. One time axis for
// both channels, from each one's request, so their difference is seen at a glance.

const COLORS = { sse: '#b5521b', ws: '#1f6fb2', gap: '#d0021b', axis: '#666', grid: '#e4e4e4', level: '#9cc3a2' };
const LANE = 34;
const LEFT = 64;

function span(runs) {
  let end = 1000;
  for (const st of runs) {
    const last = st.levels.length ? st.levels[st.levels.length - 1][0] : 0;
    end = Math.max(end, last, st.endedMs || 0);
  }
  return Math.ceil(end / 500) * 500;
}

function axis(g, w, h, total) {
  const step = total > 8000 ? 1000 : total > 3000 ? 500 : 250;
  g.font = '11px system-ui, sans-serif';
  g.textAlign = 'center';
  for (let t = 0; t <= total; t += step) {
    const x = LEFT + (t / total) * (w - LEFT - 10);
    g.fillStyle = COLORS.grid;
    g.fillRect(x, 0, 1, h - 16);
    g.fillStyle = COLORS.axis;
    g.fillText(t >= 1000 ? `${t / 1000}s` : `${t}`, x, h - 4);
  }
}

function lane(g, st, top, x, label) {
  const color = COLORS[st.channel];
  g.fillStyle = color;
  g.textAlign = 'left';
  g.fillText(`${st.channel} ${label}`, 4, top + LANE / 2 + 4);
  return color;
}

function drawRun(g, st, top, x) {
  const color = lane(g, st, top, x, 'in');
  for (const p of st.payloads) g.fillRect(x(p.arriveMs), top + 14, 1.5, LANE - 18);
  g.textAlign = 'center';
  for (const s of st.sentences) {
    g.fillRect(x(s.arriveMs) - 1, top + 2, 3, LANE - 4);
    g.fillText(`${s.index}`, x(s.arriveMs) + 7, top + 11);
  }
  const ptop = top + LANE + 2;
  lane(g, st, ptop, x, 'play');
  g.fillStyle = COLORS.level;
  // one bar per pixel column, its loudest sample (a level every 10 ms: thousands of bars a reply)
  let col = -1, peak = 0;
  const bar = () => {
    const hgt = Math.min(LANE - 4, peak * 4 * (LANE - 4));
    if (hgt > 0) g.fillRect(col, ptop + (LANE - hgt) / 2, 2, hgt);
  };
  for (const [t, rms] of st.levels) {
    const px = Math.floor(x(t));
    if (px !== col) { if (col >= 0) bar(); col = px; peak = 0; }
    peak = Math.max(peak, rms);
  }
  if (col >= 0) bar();
  g.fillStyle = color;
  for (const p of st.payloads) if (p.playMs !== null) g.fillRect(x(p.playMs), ptop + 14, 1.5, LANE - 18);
  for (const s of st.sentences) {
    if (s.playMs === null) continue;
    g.fillRect(x(s.playMs) - 1, ptop + 2, 3, LANE - 4);
    g.fillText(`${s.index}`, x(s.playMs) + 7, ptop + 11);
  }
  g.fillStyle = COLORS.gap;
  for (const gap of st.gaps) g.fillRect(x(gap.atMs), ptop, Math.max(2, x(gap.atMs + gap.ms) - x(gap.atMs)), LANE);
  if (st.cancel) g.fillRect(x(st.cancel.atMs), top, 2, LANE * 2);
  return ptop + LANE + 6;
}

export function drawTimeline(canvas, runs) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth;
  const h = 20 + runs.length * (LANE * 2 + 8);
  if (canvas.width !== w * dpr || canvas.height !== h * dpr) {
    canvas.width = w * dpr;
    canvas.height = h * dpr;
    canvas.style.height = `${h}px`;
  }
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const total = span(runs);
  const x = (t) => LEFT + (Math.max(0, t) / total) * (w - LEFT - 10);
  axis(g, w, h, total);
  g.font = '11px system-ui, sans-serif';
  let top = 2;
  for (const st of runs) top = drawRun(g, st, top, x);
}
