"""The text front-end's own cost: its time per segment and per LLM token, on against off.

``run_gateway.py bench text`` runs ``TextFrontEnd`` (gateway/text/frontend.py) in this process,
with no gateway and no engine, over the markdown replies of ``bench.corpus`` (headings, lists,
emoji, links, phone numbers, times, money, units), two ways, both with the front-end on (the
defaults: ``TextOptions()``) and off (``TextOptions(enabled=False)``: the segmenter alone, text
spoken as given), interleaved reply by reply after an uncounted warm-up (the first call imports
the emoji tables):

* per segment: a new front-end fed a whole reply in one ``feed`` and ended (``end``), that time
  divided by the segments it produced: the cost of a reply sent whole, per sentence spoken;
* per token: the same replies cut as an LLM streams them (``gateway.agent.tokenize``: short
  pieces with their leading space, about 4 characters), one ``feed`` per token, each call timed
  on its own; the calls that complete a segment pay for reading it, so p99 is what a token that
  ends a sentence costs.

It prints p50 and p99 in microseconds for each, on and off side by side, and the ratio on/off;
a new front-end per reply (``construct``) is shown too. Times include the timer's own cost
(printed under the table). Results go to ``bench-results/text.json``.
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path
from typing import Any

import numpy as np

from gateway.agent import tokenize
from gateway.text.frontend import TextFrontEnd, TextOptions

from .common import RESULTS_DIR, recorded, run_published, table
from .corpus import markdown_corpus

MODES: dict[str, TextOptions] = {"on": TextOptions(), "off": TextOptions(enabled=False)}
LANG = "a"  # American English, the default voice's
FIRST_CLAUSE_WORDS = 2  # the gateway's default
MAX_CHARS = 300
MEASURES = ("per segment", "per token", "construct")


def new_frontend(options: TextOptions) -> TextFrontEnd:
    return TextFrontEnd(options, lang=LANG, first_clause_words=FIRST_CLAUSE_WORDS, max_chars=MAX_CHARS)


def whole(options: TextOptions, text: str) -> tuple[float, float, int]:
    """Construct, then feed ``text`` whole and end: (construct ns, feed+end ns, segments)."""
    t0 = time.perf_counter_ns()
    fe = new_frontend(options)
    t1 = time.perf_counter_ns()
    n = len(fe.feed(text)) + len(fe.end())
    t2 = time.perf_counter_ns()
    return t1 - t0, t2 - t1, n


def streamed(options: TextOptions, tokens: list[str]) -> tuple[list[int], int]:
    """Feed ``tokens`` one at a time: each ``feed`` call's ns, and the segments (with ``end``)."""
    fe = new_frontend(options)
    times, n = [], 0
    clock = time.perf_counter_ns
    for token in tokens:
        t0 = clock()
        got = fe.feed(token)
        times.append(clock() - t0)
        n += len(got)
    return times, n + len(fe.end())


def timer_cost_ns(samples: int = 10_000) -> float:
    """The median of two back-to-back ``perf_counter_ns`` calls: what every timing includes."""
    clock = time.perf_counter_ns
    out = []
    for _ in range(samples):
        t0 = clock()
        out.append(clock() - t0)
    return float(np.median(out))


def quantiles_us(values_ns: list[float]) -> dict[str, float]:
    a = np.asarray(values_ns, float) / 1000
    return {
        "n": len(a),
        "p50": round(float(np.percentile(a, 50)), 2),
        "p99": round(float(np.percentile(a, 99)), 2),
        "mean": round(float(a.mean()), 2),
    }


def measure(texts: list[str], reps: int, warmup: int) -> dict[str, Any]:
    """Both ways, both modes, every reply ``reps`` times (the mode that goes first alternates)."""
    tokens = [tokenize(t) for t in texts]
    for _ in range(warmup):
        for text, toks in zip(texts, tokens):
            for options in MODES.values():
                whole(options, text)
                streamed(options, toks)
    raw: dict[str, dict[str, list[float]]] = {m: {k: [] for k in MEASURES} for m in MODES}
    segments: dict[str, list[int]] = {m: [0] * len(texts) for m in MODES}
    for rep in range(reps):
        gc.collect()  # one sweep now rather than inside a timed call
        order = list(MODES) if rep % 2 == 0 else list(reversed(MODES))
        for i, (text, toks) in enumerate(zip(texts, tokens)):
            for mode in order:
                options = MODES[mode]
                construct, fed, n = whole(options, text)
                raw[mode]["construct"].append(construct)
                raw[mode]["per segment"].append(fed / max(n, 1))
                segments[mode][i] = n
                feeds, _ = streamed(options, toks)
                raw[mode]["per token"] += feeds
    modes = {m: {k: quantiles_us(v) for k, v in raw[m].items()} for m in MODES}
    ratios = {
        k: {q: round(modes["on"][k][q] / modes["off"][k][q], 2) for q in ("p50", "p99", "mean")} for k in MEASURES
    }
    return {"modes": modes, "ratio_on_off": ratios, "segments": segments, "tokens": [len(t) for t in tokens]}


def spoken_changes(texts: list[str]) -> dict[str, int]:
    """How much of the corpus the front-end changes: segments whose spoken form differs."""
    changed = total = 0
    for text in texts:
        fe = new_frontend(MODES["on"])
        for seg in fe.feed(text) + fe.end():
            total += 1
            changed += seg.spoken != seg.display
    return {"segments": total, "spoken_differs": changed}


def render(out: dict[str, Any]) -> str:
    modes, ratios = out["modes"], out["ratio_on_off"]
    rows = []
    for k in MEASURES:
        on, off, r = modes["on"][k], modes["off"][k], ratios[k]
        rows.append([k, on["n"], on["p50"], off["p50"], f"{r['p50']:.2f}x", on["p99"], off["p99"], f"{r['p99']:.2f}x"])
    headers = ["measure (us)", "n", "on p50", "off p50", "on/off", "on p99", "off p99", "on/off"]
    seg = out["segments"]
    lines = [
        table(headers, rows),
        f"{len(out['corpus'])} replies x {out['reps']} reps; segments per pass: on {sum(seg['on'])}, "
        f"off {sum(seg['off'])}; tokens per pass: {sum(out['tokens'])} "
        f"(mean {out['mean_token_chars']:.1f} characters); spoken form differs from the text in "
        f"{out['spoken_changes']['spoken_differs']} of {out['spoken_changes']['segments']} segments",
        f"timer cost included in each figure: {out['timer_ns']:.0f} ns",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="run_gateway.py bench text", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--reps", type=int, default=50, help="repetitions of the corpus (default: %(default)s)")
    p.add_argument("--corpus", type=int, default=None, metavar="N", help="use the first N replies (default: all 12)")
    p.add_argument("--warmup", type=int, default=2, help="uncounted passes first (default: %(default)s)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="output folder (default: %(default)s)")
    args = p.parse_args(argv)
    if args.reps < 1 or args.warmup < 1:
        p.error("--reps and --warmup must be >= 1 (the first call imports the emoji tables)")
    return args


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    texts = markdown_corpus(args.corpus)
    out: dict[str, Any] = {
        "bench": "text",
        "reps": args.reps,
        "corpus": texts,
        "settings": {"lang": LANG, "first_clause_words": FIRST_CLAUSE_WORDS, "max_chars": MAX_CHARS},
    }
    with recorded(out):
        out.update(measure(texts, args.reps, args.warmup))
        out["timer_ns"] = timer_cost_ns()
    tokens = [tok for t in texts for tok in tokenize(t)]
    out["mean_token_chars"] = round(sum(map(len, tokens)) / len(tokens), 2)
    out["spoken_changes"] = spoken_changes(texts)
    return out


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    run_published(args, bench, render)
    return 0
