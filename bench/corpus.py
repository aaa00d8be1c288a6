"""The fixed corpus the latency benchmarks speak: agent-like replies of 3 to 8 sentences.

Replies vary in length (about 20 to 50 words) and in how they open: some with a short
clause ("Sure, ..."), some with a long first sentence and no clause mark, some with a very
short sentence ("Done."), so the first-clause fast path is exercised both where it applies
and where it cannot. The first two are the shortest, so ``--corpus 2`` is a quick run.
"""

from __future__ import annotations

from gateway.agent import REPLIES as AGENT_REPLIES
from gateway.agent import pick_reply

REPLIES: tuple[str, ...] = (
    "Sure, I can help with that. Your table for four is booked for seven. You will get a text when it is ready.",
    "Done. Your dentist visit is now on Monday at nine. The clinic will remind you the day before.",
    "Okay, so the train to Boston leaves from platform six at eight fifteen. "
    "It takes about four hours. The cafe car is open the whole way. Shall I book a window seat?",
    "Your package was delivered this afternoon and left with the front desk of your building. "
    "The driver took a photo. If you cannot find it, ask the desk to check their log. "
    "I can also open a claim right away.",
    "Good morning! Today will be sunny and warm. A light breeze picks up after lunch. "
    "The evening stays clear. Tomorrow looks much the same.",
    "I checked your account, and everything looks fine. Your last payment went through on the third. "
    "The next one is due in two weeks. Automatic payments are on. "
    "You do not need to do anything. Anything else?",
    "Thanks for waiting. I found three flights. The first leaves at six and costs two hundred dollars. "
    "The second leaves at noon. The third has one stop. All of them have free changes. "
    "Which one would you like?",
    "Here is how to set up the printer. Plug it in and turn it on. Open the settings on your laptop. "
    "Choose add a device. Pick the printer from the list. The driver installs on its own. "
    "Then print a test page. Let me know how it goes.",
)


def corpus(n: int | None = None) -> list[str]:
    """The first ``n`` replies (all of them when ``n`` is None)."""
    if n is not None and not 1 <= n <= len(REPLIES):
        raise ValueError(f"--corpus must be between 1 and {len(REPLIES)}, got {n}")
    return list(REPLIES[:n])


def agent_prompts(n: int | None = None) -> list[str]:
    """One prompt per simulated-agent reply (distinct replies), found by trying short prompts.

    The simulated agent picks its reply by a hash of the prompt, so prompts are searched for
    rather than written: one for each canned reply, in the replies' own order.
    """
    found: dict[str, str] = {}
    for i in range(1000):
        prompt = f"Question number {i}?"
        found.setdefault(pick_reply(prompt), prompt)
        if len(found) == len(AGENT_REPLIES):
            break
    prompts = [found[r] for r in AGENT_REPLIES if r in found]
    if n is not None and not 1 <= n <= len(prompts):
        raise ValueError(f"--prompts must be between 1 and {len(prompts)}, got {n}")
    return prompts[:n]


# The quality benchmarks' sentences (bench quality, python -m bench.vocoder).
# ~130 words: times, money, percentages, ordinals, a large number, and heteronyms
# ("read", "close", "wind", "lives", "live") whose reading depends on part of speech.
SENTENCES = (
    "The meeting starts at 3:30 on Tuesday, so please arrive a few minutes early.",
    "I read the report yesterday, and I will read the summary again tonight.",
    "Our new office is on the 5th floor of the tall building near the station.",
    "The total came to $42.50, which is about 20% less than last year.",
    "She lives close to the river, but she wants to close the old shop.",
    "Please turn left at the second light and park behind the blue van.",
    "We shipped 1,200 orders in March and expect twice as many in April.",
    "The band will play live music at the park while the children fly kites.",
    "If the wind picks up, wind the rope around the post and hold it tight.",
    "Thank you for calling; your flight to Chicago leaves at 7:15 tomorrow.",
)
