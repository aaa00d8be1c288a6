"""Numbers as English words: cardinals, ordinals, years, decimals, digits, money, fractions.

``num2words`` does the counting (the library misaki itself reads numbers with); this module only
says which reading a written form takes and cleans its output for speech (no commas; no "and"
inside numbers for American English, as Americans say them; British keeps it).
"""

from __future__ import annotations

from num2words import num2words

__all__ = ["cardinal", "decimal", "digits", "fraction", "money", "number", "ordinal", "year"]

_DIGIT = "zero one two three four five six seven eight nine".split()
# currency symbol or code -> (one, many, cent-one, cent-many)
CURRENCIES: dict[str, tuple[str, str, str, str]] = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "US$": ("dollar", "dollars", "cent", "cents"),
    "USD": ("dollar", "dollars", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "GBP": ("pound", "pounds", "penny", "pence"),
    "€": ("euro", "euros", "cent", "cents"),
    "EUR": ("euro", "euros", "cent", "cents"),
    "¥": ("yen", "yen", "", ""),
    "JPY": ("yen", "yen", "", ""),
    "CNY": ("yuan", "yuan", "", ""),
    "₹": ("rupee", "rupees", "paisa", "paise"),
    "INR": ("rupee", "rupees", "paisa", "paise"),
    "₩": ("won", "won", "", ""),
    "₽": ("ruble", "rubles", "kopek", "kopeks"),
    "₿": ("bitcoin", "bitcoin", "", ""),
    "CAD": ("Canadian dollar", "Canadian dollars", "cent", "cents"),
    "AUD": ("Australian dollar", "Australian dollars", "cent", "cents"),
    "CHF": ("Swiss franc", "Swiss francs", "centime", "centimes"),
    "¢": ("cent", "cents", "", ""),
}
SCALES = {"k": "thousand", "K": "thousand", "M": "million", "m": "million", "B": "billion", "bn": "billion"}
SCALES |= {"T": "trillion", "thousand": "thousand", "million": "million", "billion": "billion"}
SCALES |= {"trillion": "trillion", "mn": "million"}


def _clean(words: str, british: bool) -> str:
    words = words.replace(",", "")
    return words if british else words.replace(" and ", " ")


def cardinal(n: int | str, british: bool = False) -> str:
    value = int(str(n).replace(",", ""))
    if abs(value) >= 10**15:
        return digits(str(abs(value)))
    words = _clean(str(num2words(abs(value))), british)
    return f"minus {words}" if value < 0 else words


def ordinal(n: int | str, british: bool = False) -> str:
    return _clean(str(num2words(int(str(n).replace(",", "")), to="ordinal")), british)


def year(n: int | str) -> str:
    value = int(n)
    if 2000 <= value <= 2009:
        return cardinal(value)
    return str(num2words(value, to="year")).replace("-", " ")


def digits(text: str) -> str:
    return " ".join(_DIGIT[int(c)] for c in text if c.isdigit())


def decimal(text: str, british: bool = False) -> str:
    """ "3.14" -> "three point one four"; "1,234.5" -> "one thousand two hundred thirty-four point five"."""
    text = text.replace(",", "")
    whole, _, frac = text.partition(".")
    sign = "minus " if whole.startswith("-") else ""
    whole = whole.lstrip("-+")
    head = cardinal(whole or "0", british)
    return f"{sign}{head} point {digits(frac)}" if frac else f"{sign}{head}"


def number(text: str, british: bool = False) -> str:
    """A written number as it is read: cardinal, decimal, or digits for a leading zero ("007")."""
    bare = text.replace(",", "").lstrip("-+")
    if len(bare) > 1 and bare.startswith("0") and "." not in bare:
        return digits(bare)
    return decimal(text, british) if "." in text else cardinal(text, british)


def money(amount: str, code: str, scale: str = "", british: bool = False) -> str:
    one, many, cent_one, cent_many = CURRENCIES[code]
    amount = amount.replace(",", "")
    if scale:
        return f"{number(amount, british)} {SCALES[scale]} {many}"
    whole, _, cents = amount.partition(".")
    whole_n = int(whole or "0")
    if cents and cent_one and len(cents) <= 2:
        c = int(cents.ljust(2, "0"))
        unit_words = f"{cardinal(whole_n, british)} {one if whole_n == 1 else many}"
        cent_words = f"{cardinal(c, british)} {cent_one if c == 1 else cent_many}"
        if c == 0:
            return unit_words
        return cent_words if whole_n == 0 else f"{unit_words} and {cent_words}"
    if cents:
        return f"{decimal(amount, british)} {many}"
    return f"{cardinal(whole_n, british)} {one if whole_n == 1 else many}"


_DENOMINATORS = {2: ("half", "halves"), 4: ("quarter", "quarters")}


def fraction(a: int, b: int, british: bool = False) -> str:
    """ "1/3" -> "one third", "3/4" -> "three quarters", "5/100" -> "five over one hundred"."""
    if b in _DENOMINATORS:
        one, many = _DENOMINATORS[b]
    elif 3 <= b <= 20 or b in (100, 1000):
        one = ordinal(b, british)
        many = one + "s"
    else:
        return f"{cardinal(a, british)} over {cardinal(b, british)}"
    return f"{cardinal(a, british)} {one if a == 1 else many}"
