"""The corpus behind tests/test_text_corpus.py: (category, written, spoken, display or None)."""

from __future__ import annotations

Case = tuple[str, str, str, str | None]

_MARKDOWN: list[tuple[str, str, str | None]] = [
    ("**Sure!** Here you go.", "Sure! Here you go.", "Sure! Here you go."),
    ("I *really* like it.", "I really like it.", "I really like it."),
    ("I __really__ like _this_ one.", "I really like this one.", "I really like this one."),
    ("***Very*** important.", "Very important.", "Very important."),
    ("# Title", "Title.", "Title"),
    ("## Summary\nAll good.", "Summary. All good.", "Summary All good."),
    ("### Next steps:\nCall me.", "Next steps: Call me.", "Next steps: Call me."),
    ("- Pasta\n- Tacos", "Pasta. Tacos.", "Pasta Tacos"),
    ("* Pasta\n* Tacos", "Pasta. Tacos.", "Pasta Tacos"),
    ("+ Pasta\n+ Tacos", "Pasta. Tacos.", "Pasta Tacos"),
    ("1. Pasta with garlic\n2. Tacos", "Pasta with garlic. Tacos.", "Pasta with garlic Tacos"),
    ("1) First\n2) Second", "First. Second.", "First Second"),
    ("  - nested item\n    - deeper item", "nested item. deeper item.", "nested item deeper item"),
    ("- [x] Done\n- [ ] Todo", "Done. Todo.", "Done Todo"),
    ("- Already ends.\n- Asks?", "Already ends. Asks?", "Already ends. Asks?"),
    ("See [the docs](https://example.com/docs) now.", "See the docs now.", "See the docs now."),
    ('Read [this guide](/guide "Guide") first.', "Read this guide first.", "Read this guide first."),
    ("Logo: ![a red logo](logo.png) done.", "Logo: a red logo done.", "Logo: a red logo done."),
    ("Image ![](pic.png) here.", "Image here.", "Image  here."),  # the display keeps the client's spaces
    ("Run `pip install kokoro` first.", "Run pip install kokoro first.", "Run pip install kokoro first."),
    ("Use ``a `tick` inside`` it.", "Use a `tick` inside it.", "Use a `tick` inside it."),
    ("> Quoted wisdom.", "Quoted wisdom.", "Quoted wisdom."),
    ("> > Deeply quoted.", "Deeply quoted.", "Deeply quoted."),
    ("Before.\n\n---\n\nAfter.", "Before. After.", "Before. After."),
    ("Before.\n***\nAfter.", "Before. After.", "Before. After."),
    ("~~old~~ new price", "old new price", "old new price"),
    ("| Item | Price |\n|---|---|\n| Pasta | 12 |", "Item, Price. Pasta, twelve.", "Item ,  Price Pasta ,  12"),
    ("A <b>bold</b> move.", "A bold move.", "A bold move."),
    ("Line one<br>Line two", "Line one Line two", "Line one Line two"),
    ("Visit <https://example.com> today.", "Visit example dot com today.", "Visit https://example.com today."),
    ("Tom &amp; Jerry", "Tom and Jerry", "Tom & Jerry"),
    ("Escaped \\*stars\\* stay.", "Escaped stars stay.", "Escaped *stars* stay."),
    ("snake_case_name is fine", "snake case name is fine", "snake_case_name is fine"),
    ("3 * 4 is twelve", "three times four is twelve", "3 * 4 is twelve"),
    ("Here:\n```python\nprint('hi')\n```\nDone.", "Here: Code omitted. Done.", "Here: Done."),
    ("~~~\ncode\n~~~\nAfter the code.", "Code omitted. After the code.", "After the code."),
    ("**Bold with [a link](https://x.com)**.", "Bold with a link.", "Bold with a link."),
    ("_Note:_ the **end**.", "Note: the end.", "Note: the end."),
    ("Heading\n=======\nText.", "Heading Text.", "Heading Text."),
    ("Price is *$5*!", "Price is five dollars!", "Price is $5!"),
]

_EMOJI: list[tuple[str, str, str | None]] = [
    ("Great job! 🎉 See you tomorrow 😊", "Great job! See you tomorrow", None),
    ("Done ✅ Your visit moved.", "Done, Your visit moved.", None),
    ("Quick recipe 🍝:", "Quick recipe:", None),
    ("- Tacos (spicy) 🌮", "Tacos (spicy).", "Tacos (spicy) 🌮"),
    ("Thumbs up 👍🏽 from me.", "Thumbs up from me.", None),
    ("Family 👨‍👩‍👧 time.", "Family time.", None),
    ("Flags 🇺🇸 and 🇯🇵 wave.", "Flags and wave.", None),
    ("Press 1️⃣ now.", "Press now.", None),
    ("🚀 Launching now!", "Launching now!", None),
    ("Done ✅", "Done", None),
    ("I ❤️ it.", "I it.", None),
    ("Hot ☕ coffee.", "Hot coffee.", None),
    ("Sunny ☀️ day!", "Sunny day!", None),
    ("Stars ⭐⭐⭐ all round.", "Stars  all round.", None),
]

_URL: list[tuple[str, str, str | None]] = [
    (
        "Visit https://example.com/docs/start for details.",
        "Visit example dot com slash docs slash start for details.",
        None,
    ),
    ("Go to www.example.org now.", "Go to example dot org now.", None),
    ("See example.com.", "See example dot com.", None),
    ("Try github.io today.", "Try github dot I O today.", None),
    ("Open https://bbc.co.uk/news?id=3#top please.", "Open bbc dot co dot U K slash news please.", None),
    (
        "Docs at https://docs.python.org/3/library now.",
        "Docs at docs dot python dot org slash three slash library now.",
        None,
    ),
    ("Read https://my-site.dev/a_b for more.", "Read my dash site dot dev slash A underscore B for more.", None),
    ("The site http://example.net works.", "The site example dot net works.", None),
    ("Ask openai.com or anthropic.ai.", "Ask openai dot com or anthropic dot A I.", None),
    ("Check https://example.com/.", "Check example dot com.", None),
]

_EMAIL: list[tuple[str, str, str | None]] = [
    ("Write to support@example.com today.", "Write to support at example dot com today.", None),
    ("Email jane.doe@mail.co.uk please.", "Email jane dot doe at mail dot co dot U K please.", None),
    ("Contact first_last@corp.io now.", "Contact first underscore last at corp dot I O now.", None),
    ("Send to sales+eu@shop.com.", "Send to sales plus eu at shop dot com.", None),
    ("Reach bob42@example.org.", "Reach bob forty-two at example dot org.", None),
]

_PHONE: list[tuple[str, str, str | None]] = [
    ("Call (555) 123-4567 now.", "Call five five five, one two three, four five six seven now.", None),
    ("Call 555-123-4567.", "Call five five five, one two three, four five six seven.", None),
    ("Call 555.123.4567.", "Call five five five, one two three, four five six seven.", None),
    ("Call +1 555 123 4567.", "Call plus one, five five five, one two three, four five six seven.", None),
    ("Dial 1-800-555-0199 today.", "Dial one, eight zero zero, five five five, zero one nine nine today.", None),
    ("Call +44 20 7946 0958.", "Call plus four four, two zero, seven nine four six, zero nine five eight.", None),
    ("Dial 555-1234.", "Dial five five five, one two three four.", None),
    (
        "My number is +49 30 1234 5678.",
        "My number is plus four nine, three zero, one two three four, five six seven eight.",
        None,
    ),
]

_TIME: list[tuple[str, str, str | None]] = [
    ("The meeting is at 3:30 PM.", "The meeting is at three thirty P M.", None),
    ("Wake at 7:05 am.", "Wake at seven oh five A M.", None),
    ("Lunch at 12:00.", "Lunch at twelve o'clock.", None),
    ("Dinner at 6pm.", "Dinner at six P M.", None),
    ("Open 9am-5pm daily.", "Open nine A M to five P M daily.", None),
    ("Departs 15:45.", "Departs fifteen forty-five.", None),
    ("At 3 p.m. we leave.", "At three P M we leave.", None),
    ("It ends at 11:59 PM tonight.", "It ends at eleven fifty-nine P M tonight.", None),
    ("Arrive by 08:00.", "Arrive by eight hundred.", None),
    ("From 9:30 AM to 4:15 PM.", "From nine thirty A M to four fifteen P M.", None),
    ("Alarm at 6:00 AM.", "Alarm at six A M.", None),
    ("Ran it in 4h 05m flat.", "Ran it in four hours five minutes flat.", None),
    ("Open 10:30-11:30 daily.", "Open ten thirty to eleven thirty daily.", None),
    ("Call 9-11am.", "Call nine to eleven A M.", None),
]

_DATE: list[tuple[str, str, str | None]] = [
    ("It is due January 5, 2027.", "It is due January fifth, twenty twenty seven.", None),
    ("Due Jan 5.", "Due January fifth.", None),
    ("Born on March 3rd, 1990.", "Born on March third, nineteen ninety.", None),
    ("On 2027-03-14 we ship.", "On March fourteenth, twenty twenty seven we ship.", None),
    ("Due 12/25/2027.", "Due December twenty-fifth, twenty twenty seven.", None),
    ("Due 5 January 2027.", "Due the fifth of January, twenty twenty seven.", None),
    ("Held on Dec. 1.", "Held on December first.", None),
    ("Confirmed for 03/15.", "Confirmed for March fifteenth.", None),
    ("See you on 3/15.", "See you on March fifteenth.", None),
    ("In 2027 we grow.", "In twenty twenty seven we grow.", None),
    ("Since 1905 it stood.", "Since nineteen oh five it stood.", None),
    ("Back in 2005 it began.", "Back in two thousand five it began.", None),
    ("The 1990s were fun.", "The nineteen nineties were fun.", None),
    ("The '80s were loud.", "The eighties were loud.", None),
    ("From 2020-2025 it grew.", "From twenty twenty to twenty twenty five it grew.", None),
    ("On 7/4/26 we celebrate.", "On July fourth, twenty twenty six we celebrate.", None),
    ("Sept 10 is the day.", "September tenth is the day.", None),
]

_ORDINAL: list[tuple[str, str, str | None]] = [
    ("She came 1st.", "She came first.", None),
    ("The 22nd runner.", "The twenty-second runner.", None),
    ("The 103rd time.", "The one hundred third time.", None),
    ("On the 4th floor.", "On the fourth floor.", None),
    ("The 11th and 12th.", "The eleventh and twelfth.", None),
    ("The 21st century.", "The twenty-first century.", None),
]

_FRACTION: list[tuple[str, str, str | None]] = [
    ("Only 1/3 of them came.", "Only one third of them came.", None),
    ("Add 2/3 cup.", "Add two thirds cup.", None),
    ("Use 3/4 of it.", "Use three quarters of it.", None),
    ("About 1/2 done.", "About one half done.", None),
    ("Take 1 1/2 cups.", "Take one and a half cups.", None),
    ("Add ½ a lemon.", "Add one half a lemon.", None),
    ("Add 1/2 tsp salt.", "Add one half teaspoon salt.", None),
    ("Open 24/7.", "Open twenty-four seven.", None),
    ("It's 50/50.", "It's fifty fifty.", None),
    ("About 5/8 inch.", "About five eighths inch.", None),
    ("Nearly 9/10 agree.", "Nearly nine tenths agree.", None),
    ("Score 3/50 only.", "Score three over fifty only.", None),
]

_RANGE: list[tuple[str, str, str | None]] = [
    ("It takes 5-10 minutes.", "It takes five to ten minutes.", None),
    ("It takes 5–10 minutes.", "It takes five to ten minutes.", None),
    ("Pages 10-20.", "Pages ten to twenty.", None),
    ("Drive 5-10 km.", "Drive five to ten kilometers.", None),
    ("Cost $5-$10.", "Cost five to ten dollars.", None),
    ("Ages 3 - 7 welcome.", "Ages three to seven welcome.", None),
    ("Between 1.5-2.5 liters.", "Between one point five to two point five liters.", None),
]

_UNIT: list[tuple[str, str, str | None]] = [
    ("It's about 5 km away.", "It's about five kilometers away.", None),
    ("Only 1 km left.", "Only one kilometer left.", None),
    ("It is 72°F outside.", "It is seventy-two degrees Fahrenheit outside.", None),
    ("It is -5°C now.", "It is minus five degrees Celsius now.", None),
    ("Turn 90° left.", "Turn ninety degrees left.", None),
    ("Save 30% today.", "Save thirty percent today.", None),
    ("Drive 60 mph max.", "Drive sixty miles per hour max.", None),
    ("It weighs 2.5 kg.", "It weighs two point five kilograms.", None),
    ("Lift 10 lbs.", "Lift ten pounds.", None),
    ("About 5 ft tall.", "About five feet tall.", None),
    ("Cut 3 cm off.", "Cut three centimeters off.", None),
    ("Wait 2 hrs.", "Wait two hours.", None),
    ("Wait 45 min.", "Wait forty-five minutes.", None),
    ("It has 16 GB of RAM.", "It has sixteen gigabytes of RAM.", None),
    ("A 3.2 GHz chip.", "A three point two gigahertz chip.", None),
    ("Speed up 2x now.", "Speed up two times now.", None),
    ("Drink 500 ml daily.", "Drink five hundred milliliters daily.", None),
    ("A 100 W bulb.", "A one hundred watts bulb.", None),
    ("Latency is 200 ms.", "Latency is two hundred milliseconds.", None),
    ("Download 1.5 TB.", "Download one point five terabytes.", None),
    ("Add 2 tsp salt and 1 tbsp oil.", "Add two teaspoons salt and one tablespoon oil.", None),
    ("For 3 yrs and 2 wks.", "For three years and two weeks.", None),
    ("Save 10-20% now.", "Save ten to twenty percent now.", None),
    ("Cut 2 x 4 boards.", "Cut two by four boards.", None),
    ("Runs at 100 km/h.", "Runs at one hundred kilometers per hour.", None),
]

_SYMBOL: list[tuple[str, str, str | None]] = [
    ("We're #1 today.", "We're number one today.", None),
    ("Order #12345 shipped.", "Order number one two three four five shipped.", None),
    ("Cool (65°F / 18°C) today.", "Cool (sixty-five degrees Fahrenheit or eighteen degrees Celsius) today.", None),
    ("DM @acme_support now.", "DM at acme support now.", None),
    ("Salt & pepper.", "Salt and pepper.", None),
    ("R&D grew.", "R and D grew.", None),
    ("2 + 2 = 4", "two plus two equals four", None),
    ("Costs ~5 dollars.", "Costs about five dollars.", None),
    ("Coffee w/ milk.", "Coffee with milk.", None),
    ("Tea w/o sugar.", "Tea without sugar.", None),
    ("Yes/no answers.", "Yes or no answers.", None),
    ("Use and/or here.", "Use and or here.", None),
    ("A → B works.", "A to B works.", None),
    ("Open Settings > Printers now.", "Open Settings, then Printers now.", None),
    ("If x > 5 stop.", "If x greater than five stop.", None),
    ("Pace 5:07 min/km today.", "Pace five oh seven min per kilometer today.", None),
    ("The #hashtag trend.", "The hashtag trend.", None),
    ("Rated 5 × 3 grid.", "Rated five by three grid.", None),
    ("It's $5/month or $50/yr.", "It's five dollars per month or fifty dollars per year.", None),
    ("Studies show [1] that it works [2][3].", "Studies show that it works.", None),
    ("Temperature ±2 degrees.", "Temperature plus or minus two degrees.", None),
]

_ABBREVIATION: list[tuple[str, str, str | None]] = [
    ("Dr. Smith will see you.", "Doctor Smith will see you.", None),
    ("Turn onto Oak Dr. next.", "Turn onto Oak Drive next.", None),
    ("He lives on Main St. now.", "He lives on Main Street now.", None),
    ("Meet at 12 Main St. Please be early.", "Meet at twelve Main Street. Please be early.", None),
    ("We visited St. Mary's church.", "We visited Saint Mary's church.", None),
    ("It is approx. 5 km.", "It is approximately five kilometers.", None),
    ("Bring fruit, e.g. apples.", "Bring fruit, for example apples.", None),
    ("One thing, i.e. this.", "One thing, that is this.", None),
    ("Pens, paper, etc.", "Pens, paper, et cetera.", None),
    ("Cats vs. dogs.", "Cats versus dogs.", None),
    ("Mr. and Mrs. Jones came.", "Mister and Missus Jones came.", None),
    ("Ms. Lee spoke.", "Miz Lee spoke.", None),
    ("Prof. Chen teaches.", "Professor Chen teaches.", None),
    ("Martin Luther King Jr. spoke.", "Martin Luther King Junior spoke.", None),
    ("Room No. 5 is free.", "Room number five is free.", None),
    ("See p. 12 first.", "See page twelve first.", None),
    ("Climb Mt. Everest.", "Climb Mount Everest.", None),
    ("Live on 5th Ave. now.", "Live on fifth Avenue now.", None),
    ("Meet on Mon. morning.", "Meet on Monday morning.", None),
    ("EPS of $1.10 est. today.", "EPS of one dollar and ten cents estimated today.", None),
    ("Est. 1990 in Ohio.", "Established nineteen ninety in Ohio.", None),
    ("Your appt. with Dr. Lee.", "Your appointment with Doctor Lee.", None),
    ("When: Fri, Dec 12.", "When: Friday, December twelfth.", None),
    ("Call ext. 4410 now.", "Call extension four thousand four hundred ten now.", None),
    ("Apples vs oranges.", "Apples versus oranges.", None),
    ("About approx 10 people.", "About approximately ten people.", None),
    ("E.g. this one.", "For example this one.", None),
    ("Acme Corp. grew.", "Acme Corporation grew.", None),
    ("See Fig. 3 below.", "See figure three below.", None),
    ("Apt. 12 is open.", "Apartment twelve is open.", None),
    ("Call apt. 12 now.", "Call apartment twelve now.", None),
]

_NUMBER: list[tuple[str, str, str | None]] = [
    ("I have 3 cats.", "I have three cats.", None),
    (
        "About 1,234,567 fish.",
        "About one million two hundred thirty-four thousand five hundred sixty-seven fish.",
        None,
    ),
    ("Pi is 3.14.", "Pi is three point one four.", None),
    ("Add 0.5 liters.", "Add zero point five liters.", None),
    ("About 10k users.", "About ten thousand users.", None),
    ("Reached 1.5M people.", "Reached one point five million people.", None),
    ("Worth 2B today.", "Worth two billion today.", None),
    ("Agent 007 here.", "Agent zero zero seven here.", None),
    ("Meet in Room 4B.", "Meet in Room four B.", None),
    ("Tracking number 1Z999AA1012.", "Tracking number one Z nine nine nine A A one zero one two.", None),
    ("Finished in 52:14 flat.", "Finished in fifty-two fourteen flat.", None),
    ("Averaged 148 bpm.", "Averaged one hundred forty-eight beats per minute.", None),
    ("It dropped to -3 today.", "It dropped to minus three today.", None),
    ("We sold 12 units.", "We sold twelve units.", None),
    ("Rated 4.5 out of 5.", "Rated four point five out of five.", None),
    ("A 100 year plan.", "A one hundred year plan.", None),
    ("Over 1,000 people.", "Over one thousand people.", None),
    ("Sold 3 million copies.", "Sold three million copies.", None),
]

_VERSION: list[tuple[str, str, str | None]] = [
    ("Update to v2.1.3 now.", "Update to version two point one point three now.", None),
    ("Version v2 is out.", "Version two is out.", None),
    ("Install 1.2.3 today.", "Install one point two point three today.", None),
    ("Python 3.11 works.", "Python three point one one works.", None),
    ("Use v10 or later.", "Use version ten or later.", None),
]

_MONEY: list[tuple[str, str, str | None]] = [
    ("It costs $42.50 today.", "It costs forty-two dollars and fifty cents today.", None),
    ("Only $5.", "Only five dollars.", None),
    ("Just $1.", "Just one dollar.", None),
    ("It's $0.99 each.", "It's ninety-nine cents each.", None),
    ("It costs €5.99.", "It costs five euros and ninety-nine cents.", None),
    ("It costs £20.", "It costs twenty pounds.", None),
    ("It costs ¥500.", "It costs five hundred yen.", None),
    ("It costs ₹1,200.", "It costs one thousand two hundred rupees.", None),
    ("Raised $1.5M in funding.", "Raised one point five million dollars in funding.", None),
    ("A $2 billion deal.", "A two billion dollars deal.", None),
    ("Pay 50 USD now.", "Pay fifty dollars now.", None),
    ("Only 99¢ each.", "Only ninety-nine cents each.", None),
    ("It cost $1,000,000.", "It cost one million dollars.", None),
    ("Fees of 20 EUR apply.", "Fees of twenty euros apply.", None),
]

_PAUSE: list[tuple[str, str, str | None]] = [
    ("Wait for it. [pause:1s] Now!", "Wait for it. Now!", "Wait for it. Now!"),
    ("One [pause:500ms] two.", "One two.", "One two."),
    ('Ready. <break time="700ms"/> Go.', "Ready. Go.", "Ready. Go."),
    ('Ready. <break strength="strong"/> Go.', "Ready. Go.", "Ready. Go."),
    ("Hmm. [PAUSE: 0.3 s] Fine.", "Hmm. Fine.", "Hmm. Fine."),
]

_SSML: list[tuple[str, str, str | None]] = [
    ("<speak>Hello there.</speak>", "Hello there.", "Hello there."),
    ('The <sub alias="World Wide Web">WWW</sub> grew.', "The World Wide Web grew.", "The WWW grew."),
    ('Spell <say-as interpret-as="characters">abc</say-as> now.', "Spell A B C now.", "Spell abc now."),
    ('Code <say-as interpret-as="digits">2027</say-as> works.', "Code two zero two seven works.", "Code 2027 works."),
    (
        'Call <say-as interpret-as="telephone">555 1234</say-as>.',
        "Call five five five, one two three four.",
        "Call 555 1234.",
    ),
    (
        'On <say-as interpret-as="date" format="dmy">05/01/2027</say-as>.',
        "On January fifth, twenty twenty seven.",
        "On 05/01/2027.",
    ),
    ('At <say-as interpret-as="time">3:30pm</say-as>.', "At three thirty P M.", "At 3:30pm."),
    ('The <say-as interpret-as="ordinal">3</say-as> try.', "The third try.", "The 3 try."),
    ('<prosody rate="slow">Slowly now.</prosody>', "Slowly now.", "Slowly now."),
    ("An <emphasis>important</emphasis> point.", "An important point.", "An important point."),
    ("<speak><p>First part.</p><p>Second part.</p></speak>", "First part. Second part.", "First part. Second part."),
    ("<speak><s>One</s><s>Two</s></speak>", "One. Two.", "One Two"),
]

_PHONEME: list[tuple[str, str, str | None]] = [
    ("Say [Kokoro](/kˈOkəɹO/) twice.", "Say [Kokoro](/kˈOkəɹO/) twice.", "Say Kokoro twice."),
    (
        'A <phoneme alphabet="ipa" ph="təmˈɑːtO">tomato</phoneme> here.',
        "A [tomato](/təmˈɑːtO/) here.",
        "A tomato here.",
    ),
]

_PLAIN: list[tuple[str, str, str | None]] = [
    ("Sure, I can help with that.", "Sure, I can help with that.", None),
    ("What time is it?", "What time is it?", None),
    ("It's a U.S. company.", "It's a U.S. company.", None),
    ("NASA and the FAQ page.", "NASA and the FAQ page.", None),
    ("Well... maybe.", "Well... maybe.", None),
    ("Hello — world.", "Hello — world.", None),
    ("I read it “carefully”.", "I read it “carefully”.", None),
    ("Don't stop.", "Don't stop.", None),
    ("C++ is fast.", "C++ is fast.", None),
    ("The A/B test won.", "The A B test won.", None),
]

_GROUPS = {
    "markdown": _MARKDOWN, "emoji": _EMOJI, "url": _URL, "email": _EMAIL, "phone": _PHONE, "time": _TIME,
    "date": _DATE, "ordinal": _ORDINAL, "fraction": _FRACTION, "range": _RANGE, "unit": _UNIT,
    "symbol": _SYMBOL, "abbreviation": _ABBREVIATION, "number": _NUMBER, "version": _VERSION, "money": _MONEY,
    "pause": _PAUSE, "ssml": _SSML, "phoneme": _PHONEME, "plain": _PLAIN,
}  # fmt: skip
CASES: list[Case] = [(name, w, s, d) for name, group in _GROUPS.items() for w, s, d in group]

CASES_GB: list[Case] = [
    ("date", "Due 5/6/2027.", "Due the fifth of June, twenty twenty seven.", None),
    ("date", "Due January 5, 2027.", "Due the fifth of January, twenty twenty seven.", None),
    ("number", "About 105 people.", "About one hundred and five people.", None),
    ("money", "It costs £3.50.", "It costs three pounds and fifty pence.", None),
    ("markdown", "**Cheers!** See you.", "Cheers! See you.", "Cheers! See you."),
]
