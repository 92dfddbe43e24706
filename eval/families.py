"""The four task families of the eval set: templates filled from a
`random.Random`, with each answer computed by a solver from the drawn
parameters (exact arithmetic on `Fraction`s and integers). Used by
eval/generate.py, which owns the output files and the self-check.
"""

import calendar
import datetime
import json
from decimal import ROUND_HALF_UP, ROUND_UP, Decimal, localcontext
from fractions import Fraction as F

NUM_ONLY = " Answer with the number only."
LETTER_ONLY = "Answer with the letter only."
LETTERS = "ABCD"

# Exact factors (all by definition):
#   1 mile = 1.609344 km            1 lb = 0.45359237 kg
#   1 US gallon = 3.785411784 L     1 inch = 2.54 cm
#   degF = degC * 9/5 + 32          1 oz = 28.349523125 g
#   1 hour = 60 min, 1 min = 60 s   1 KiB = 1024 bytes, 1 MiB = 1024 KiB
MILE_KM = F("1.609344")
LB_KG = F("0.45359237")
GAL_L = F("3.785411784")
INCH_CM = F("2.54")
OZ_G = F("28.349523125")

NAMES = ["Maya", "Tom", "Priya", "Omar", "Lena", "Kenji", "Sofia", "Ben",
         "Amara", "Luca", "Zoë", "Diego", "Hana", "Noah", "Ines", "Ravi",
         "Chloé", "Mateo", "Aisha", "Felix", "Yara", "Søren", "Mei", "Jonas"]
SURNAMES = ["Shah", "Okafor", "Watanabe", "Novak", "García", "Berg", "Rossi",
            "Kowalski", "Haddad", "Lindqvist", "Moreau", "Costa", "Nakamura",
            "Fischer", "Mensah", "Álvarez", "Petrov", "Dubois", "Kim", "Silva"]
CITIES = ["Lisbon", "Oslo", "Nairobi", "Osaka", "Toronto", "Zürich", "Kraków",
          "São Paulo", "Melbourne", "Dublin", "Seoul", "Lima", "Porto",
          "Reykjavík", "Accra", "Vienna", "Montréal", "Hanoi", "Bergen", "Cusco"]
GOODS = [("notebooks", 245), ("pens", 120), ("apples", 65), ("mugs", 875),
         ("candles", 399), ("socks", 550), ("batteries", 325), ("stamps", 95),
         ("pencils", 40), ("bagels", 185), ("postcards", 150), ("plants", 1250)]
PRODUCTS = ["Nimbus X2", "Aurora 7", "Vega Pro", "Orbit S", "Kestrel 3",
            "Lumen Mini", "Atlas 12", "Pixel Duo", "Comet Air", "Tundra 5"]
TEAMS = ["design", "finance", "research", "support", "sales", "legal"]
DAYS = list(calendar.day_name)  # Monday .. Sunday (English, fixed)


class Problem(Exception):
    """A task that fails its own check."""


def money(cents):
    return f"{cents // 100}.{cents % 100:02d}" if cents % 100 else str(cents // 100)


def q2(value):
    """A Fraction rounded half-up to 2 decimals, as a Decimal."""
    with localcontext() as ctx:
        ctx.prec = 60
        d = Decimal(value.numerator) / Decimal(value.denominator)
        return d.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def exact_2dp(value):
    return (value * 100).denominator == 1


def num_text(value):
    """The reference answer: an integer as such, otherwise 2 decimals."""
    d = q2(value)
    return str(int(d)) if d == d.to_integral_value() else f"{d:.2f}"


def num_json(text):
    return int(text) if "." not in text else float(text)


def number_task(prompt, value, tolerance="0.01"):
    text = num_text(value)
    check = {"kind": "number", "expected": num_json(text), "tolerance": float(tolerance)}
    return prompt + NUM_ONLY, check, text


# ---------------------------------------------------------------- arithmetic

def a_shopping(r):
    n = r.choice(NAMES)
    (g1, p1), (g2, p2) = r.sample(GOODS, 2)
    q1, q2_ = r.randint(2, 6), r.randint(2, 5)
    total = q1 * p1 + q2_ * p2
    bill = next(b for b in (2000, 5000, 10000, 20000) if b > total)
    p = {"q1": q1, "p1": p1, "q2": q2_, "p2": p2, "bill": bill}
    text = (f"{n} buys {q1} {g1} at ${money(p1)} each and {q2_} {g2} at ${money(p2)} each, "
            f"and pays with a ${bill // 100} bill. How much change, in dollars, does {n} get?")
    return text, p


def a_ages(r):
    a, b, c = r.sample(NAMES, 3)
    x, k, d, y = r.randint(4, 15), r.randint(2, 4), r.randint(2, 9), r.randint(2, 12)
    p = {"x": x, "k": k, "d": d, "y": y}
    text = (f"{a} is {k} times as old as {b}. {c} is {d} years younger than {a}. "
            f"{b} is {x} years old. How old will {c} be in {y} years?")
    return text, p


def a_train(r):
    while True:
        v1, v2 = r.randrange(40, 161, 5), r.randrange(30, 121, 2)
        t1, t2 = F(r.randint(2, 10), 2), r.randrange(10, 121, 5)
        if exact_2dp(v1 * t1 + F(v2 * t2, 60)):
            break
    p = {"v1": v1, "t1": t1, "v2": v2, "t2": t2}
    text = (f"A train travels at {v1} km/h for {float(t1):g} hours, then at {v2} km/h for "
            f"{t2} minutes. How many kilometres does it travel in total?")
    return text, p


def a_meet(r):
    v1, v2 = r.randrange(40, 131, 5), r.randrange(50, 141, 5)
    t = F(r.randint(3, 20), 4)
    d = (v1 + v2) * t
    p = {"d": d, "v1": v1, "v2": v2}
    text = (f"Two trains start {float(d):g} km apart on the same track and travel towards "
            f"each other at {v1} km/h and {v2} km/h. After how many hours do they meet?")
    return text, p


def a_sharing(r):
    n = r.choice(NAMES)
    t, c, g = r.randint(3, 12), r.choice([12, 16, 20, 24, 30]), r.randint(3, 9)
    k = (t * c) % g + g * r.randint(1, 3)
    p = {"t": t, "c": c, "g": g, "k": k}
    text = (f"{n} bakes {t} trays of {c} cookies, keeps {k} of them, and shares the rest "
            f"equally among {g} classes. How many cookies does each class get?")
    return text, p


def a_discount(r):
    while True:
        price, d, tax = r.randint(12, 240), r.randrange(5, 55, 5), r.randint(3, 12)
        if exact_2dp(price * F(100 - d, 100) * F(100 + tax, 100)):
            break
    p = {"price": price, "d": d, "tax": tax}
    text = (f"A jacket costs ${price}. It is discounted by {d}%, then {tax}% sales tax is "
            f"added to the discounted price. What is the final price in dollars?")
    return text, p


def a_population(r):
    pop, up, down = r.randint(2, 90) * 10000, r.randint(2, 25), r.randint(2, 20)
    p = {"pop": pop, "up": up, "down": down}
    text = (f"A town has {pop:,} residents. Its population grows by {up}% in one year and "
            f"then falls by {down}% the next year. How many residents does it have then?")
    return text, p


def a_average(r):
    n = r.choice(NAMES)
    while True:
        s = [r.randint(55, 98) for _ in range(3)]
        m = r.randint(65, 92)
        if 40 <= 4 * m - sum(s) <= 100:
            break
    p = {"s": s, "m": m}
    text = (f"{n} scored {s[0]}, {s[1]} and {s[2]} on three tests. What score does {n} need "
            f"on the fourth test for an average of exactly {m} over all four?")
    return text, p


def solve_arith(kind, p):
    if kind == "shopping":
        return F(p["bill"] - p["q1"] * p["p1"] - p["q2"] * p["p2"], 100)
    if kind == "ages":
        return F(p["k"] * p["x"] - p["d"] + p["y"])
    if kind == "train":
        return p["v1"] * p["t1"] + F(p["v2"] * p["t2"], 60)
    if kind == "meet":
        return p["d"] / (p["v1"] + p["v2"])
    if kind == "sharing":
        return F(p["t"] * p["c"] - p["k"], p["g"])
    if kind == "discount":
        return p["price"] * F(100 - p["d"], 100) * F(100 + p["tax"], 100)
    if kind == "population":
        return p["pop"] * F(100 + p["up"], 100) * F(100 - p["down"], 100)
    if kind == "average":
        return F(4 * p["m"] - sum(p["s"]))
    raise Problem(f"unknown arithmetic kind {kind}")


ARITH = [("shopping", a_shopping), ("ages", a_ages), ("train", a_train),
         ("meet", a_meet), ("sharing", a_sharing), ("discount", a_discount),
         ("population", a_population), ("average", a_average)]


def arith_task(r, i):
    kind, make = ARITH[i % len(ARITH)]
    text, p = make(r)
    value = solve_arith(kind, p)
    if not exact_2dp(value) or value < 0:
        raise Problem(f"arithmetic {kind} gave {value}")
    return number_task(text, value), {"kind": kind, "p": p, "value": value}


# ---------------------------------------------------------------- units

# (kind, from-unit words, to-unit words, factor or function, relative tolerance?)
UNITS = [
    ("km-mi", "kilometres", "miles", 1 / MILE_KM, True),
    ("mi-km", "miles", "kilometres", MILE_KM, True),
    ("kg-lb", "kilograms", "pounds", 1 / LB_KG, True),
    ("lb-kg", "pounds", "kilograms", LB_KG, True),
    ("c-f", "degrees Celsius", "degrees Fahrenheit", None, False),
    ("f-c", "degrees Fahrenheit", "degrees Celsius", None, False),
    ("l-gal", "litres", "US gallons", 1 / GAL_L, True),
    ("gal-l", "US gallons", "litres", GAL_L, True),
    ("in-cm", "inches", "centimetres", INCH_CM, False),
    ("cm-in", "centimetres", "inches", 1 / INCH_CM, True),
    ("h-min", "hours", "minutes", F(60), False),
    ("h-s", "hours", "seconds", F(3600), False),
    ("s-h", "seconds", "hours", F(1, 3600), False),
    ("kib-b", "KiB", "bytes", F(1024), False),
    ("mib-kib", "MiB", "KiB", F(1024), False),
    ("b-mib", "bytes", "MiB", F(1, 1024 * 1024), False),
]


def unit_amount(r, kind):
    if kind in ("c-f",):
        return F(r.randint(-30, 110))
    if kind == "f-c":
        return F(r.randint(-20, 230))
    if kind in ("h-min", "h-s"):
        return F(r.randint(1, 40), 4)
    if kind == "s-h":
        return F(r.randint(10, 400) * 90)
    if kind == "b-mib":
        return F(r.randint(1, 900) * 10**5)
    if kind in ("kib-b", "mib-kib"):
        return F(r.randint(1, 64), 2)
    if r.random() < 0.5:
        return F(r.randint(1, 500))
    return F(r.randint(10, 2000), 10)


def solve_unit(kind, amount):
    if kind == "c-f":
        return amount * F(9, 5) + 32
    if kind == "f-c":
        return (amount - 32) * F(5, 9)
    factor = next(u[3] for u in UNITS if u[0] == kind)
    return amount * factor


def unit_task(r, i):
    kind, src, dst, _, relative = UNITS[i % len(UNITS)]
    amount = unit_amount(r, kind)
    value = solve_unit(kind, amount)
    tol = Decimal("0.01")
    if relative:
        with localcontext() as ctx:
            ctx.prec = 60
            rel = abs(q2(value)) * Decimal("0.005")
            tol = max(tol, rel.quantize(Decimal("0.01"), rounding=ROUND_UP))
    shown = f"{float(amount):,g}" if amount.denominator != 1 else f"{int(amount):,}"
    text = f"Convert {shown} {src} to {dst}. Round to 2 decimal places."
    return number_task(text, value, str(tol)), {"kind": kind, "amount": amount, "value": value}


# ---------------------------------------------------------------- JSON extraction

def schema(fields):
    return {"type": "object", "required": [f for f, _ in fields],
            "properties": {f: {"type": t} for f, t in fields}}


def j_person(r):
    name = f"{r.choice(NAMES)} {r.choice(SURNAMES)}"
    age, city = r.randint(19, 78), r.choice(CITIES)
    text = r.choice(["{n}, {a}, moved to {c} last spring.",
                     "{n} ({a}) runs a small bakery in {c}.",
                     "Our new neighbour {n} is {a} years old and comes from {c}."])
    fields = [("name", "string"), ("age", "integer"), ("city", "string")]
    return text.format(n=name, a=age, c=city), fields, {"name": name, "age": age, "city": city}


def j_product(r):
    prod, cents, stock = r.choice(PRODUCTS), r.randint(5, 900) * 100 + r.choice([49, 50, 95, 99]), r.randint(0, 480)
    text = (f"The {prod} now sells for ${money(cents)}, and the warehouse reports "
            f"{stock} units in stock.")
    fields = [("product", "string"), ("price", "number"), ("stock", "integer")]
    price = cents // 100 if cents % 100 == 0 else float(money(cents))
    return text, fields, {"product": prod, "price": price, "stock": stock}


def j_order(r):
    oid, qty, prod, city = r.randint(10000, 99999), r.randint(1, 12), r.choice(PRODUCTS), r.choice(CITIES)
    day = datetime.date(2024, 1, 1) + datetime.timedelta(days=r.randint(0, 730))
    spoken = f"{day.day} {calendar.month_name[day.month]} {day.year}"
    text = f"Order #{oid} for {qty} × {prod} ships to {city} on {spoken}."
    fields = [("order_id", "integer"), ("quantity", "integer"), ("product", "string"),
              ("city", "string"), ("ship_date", "string")]
    expected = {"order_id": oid, "quantity": qty, "product": prod, "city": city,
                "ship_date": day.isoformat()}
    return text, fields, expected


def j_employee(r):
    name, team, year = f"{r.choice(NAMES)} {r.choice(SURNAMES)}", r.choice(TEAMS), r.randint(2005, 2024)
    remote = r.random() < 0.5
    where = "works fully remotely" if remote else "works from the office every day"
    text = f"{name} joined the {team} team in {year} and {where}."
    fields = [("name", "string"), ("team", "string"), ("start_year", "integer"),
              ("remote", "boolean")]
    return text, fields, {"name": name, "team": team, "start_year": year, "remote": remote}


JSONS = [j_person, j_product, j_order, j_employee]
HINTS = {"ship_date": "ship_date (string, YYYY-MM-DD)"}


def json_task(r, i):
    text, fields, expected = JSONS[i % len(JSONS)](r)
    spec = ", ".join(HINTS.get(f, f"{f} ({t})") for f, t in fields)
    prompt = f"{text}\nReply with a JSON object with fields {spec}."
    check = {"kind": "json_schema", "schema": schema(fields), "expected": expected}
    answer = json.dumps(expected, ensure_ascii=False, separators=(",", ":"))
    return (prompt, check, answer), {"kind": "json", "expected": expected}
