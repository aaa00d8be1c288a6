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


# Replies as a chat model writes them when nobody told it it would be spoken: markdown
# (headings, lists, bold, links, a table row, inline code), emoji, phone numbers, times, dates,
# money, percentages and units. ``bench text`` times the text front-end on them and ``bench ttfb
# --frontend-compare`` speaks them with the front-end on and off. The first two are the shortest.
MARKDOWN_REPLIES: tuple[str, ...] = (
    "Sure! 😊 Your table for **4** is booked for 7:30 PM tonight. Call (555) 123-4567 to change it.",
    "Done ✅ Your dentist visit moved to **Mon, Dec 8** at 9:15 AM. "
    "See [your booking](https://clinic.example.com/b/8812) for the address.",
    "## Your trip to Boston\n\n"
    "- **Train:** Acela 2153, leaves at 8:15 AM from platform 6\n"
    "- **Arrives:** 11:52 AM, about 3 hr 37 min\n"
    "- **Fare:** $129.50 (window seat) 🚆\n\n"
    "The cafe car is open the whole way. Shall I book it?",
    "Here are 3 plans that fit:\n\n"
    "1. *Basic*: $9.99/mo, 50 GB storage\n"
    "2. **Pro**: $24.50/mo, 2 TB, 20% off the first year\n"
    "3. **Team**: 5 users for $100/mo\n\n"
    "Most people pick **Pro**. Which one works for you? 🤔",
    "### Weather for Seattle ☁️\n\n"
    "Today: cloudy, high of 54°F (12°C), 80% chance of rain after 3 PM. "
    "Wind from the SW at 15 mph. Tomorrow looks drier, around 58°F. Bring a jacket! 🧥",
    "Your package 📦 was delivered at 2:47 PM and left with the front desk. "
    "Tracking number: `1Z999AA10123456784`. If you can't find it, call the desk at +1 415-555-0132 "
    "or open a claim at [ups.com/claims](https://www.ups.com/claims).",
    "**Account summary** (as of 12/05/2026):\n\n"
    "- Balance: $2,481.36\n"
    "- Last payment: $350.00 on Dec 3\n"
    "- Next due: **Dec 19**, minimum $45\n\n"
    "Autopay is on, so you don't need to do anything 👍",
    "I found 3 flights ✈️\n\n"
    "| Flight | Leaves | Price |\n|---|---|---|\n"
    "| UA 123 | 6:05 AM | $212 |\n| DL 88 | 12:40 PM | $189 |\n| AA 1450 | 5:55 PM | $240 |\n\n"
    "All of them allow free changes. The **12:40 PM** one has no stops. Which would you like?",
    "## Set up the printer 🖨️\n\n"
    "1. Plug it in and hold the power button for 3 seconds.\n"
    "2. On your laptop, open **Settings > Bluetooth & devices > Printers**.\n"
    "3. Choose *Add device* and pick `HP-LaserJet-M110w` from the list.\n"
    "4. Print a test page.\n\n"
    "The driver is about 150 MB and installs on its own. Let me know how it goes!",
    "Quick recipe for 2 servings 🍝:\n\n"
    "- 200 g spaghetti\n- 2 tbsp olive oil\n- 3 cloves garlic, sliced\n- 1/2 tsp chili flakes\n\n"
    "Boil the pasta for 9-10 min in salted water. Warm the oil at 160°C, add the garlic for 1 min, "
    "then toss it all together. Done in about 15 minutes!",
    "Your run today 🏃: **10.2 km** in 52:14, an average pace of 5:07 min/km. "
    "Heart rate averaged 148 bpm, peaking at 176. That's 4% faster than last week. "
    "Next up: an easy 5K on Thursday at 6:30 AM. Keep it up! 💪",
    "# Meeting notes, Q4 review\n\n"
    "**When:** Fri, Dec 12, 3:30-4:15 PM (PST)\n"
    "**Where:** Room 4B, or join at https://meet.example.com/q4-review\n\n"
    "- Revenue grew **12.5%** to $4.2M vs Q3\n"
    "- Churn fell from 3.1% to 2.4%\n"
    "- Dr. Chen will present the 2027 plan ~20 min\n\n"
    "Questions? Email ops@example.com or call ext. 4410.",
)


def markdown_corpus(n: int | None = None) -> list[str]:
    """The first ``n`` markdown replies (all of them when ``n`` is None)."""
    if n is not None and not 1 <= n <= len(MARKDOWN_REPLIES):
        raise ValueError(f"--corpus must be between 1 and {len(MARKDOWN_REPLIES)}, got {n}")
    return list(MARKDOWN_REPLIES[:n])


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
