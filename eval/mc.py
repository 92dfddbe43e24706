"""The multiple-choice family of the eval set: four options A-D built from
facts computed here (largest number, the prime, the multiple, the longest
distance, the heaviest mass, the weekday, simple geometry, the leap year).
Each kind has a solver, separate from the generator, that finds the right
options from the parameters alone; the self-check requires exactly one.
"""

import calendar
import math
from fractions import Fraction as F

from families import DAYS, INCH_CM, LB_KG, LETTER_ONLY, LETTERS, MILE_KM, OZ_G, Problem

# Metres per unit and grams per unit (exact: 1 ft = 12 in, 1 yd = 3 ft).
LENGTHS = {"m": F(1), "km": F(1000), "miles": MILE_KM * 1000,
           "ft": INCH_CM * 12 / 100, "yd": INCH_CM * 36 / 100}
MASSES = {"g": F(1), "kg": F(1000), "lb": LB_KG * 1000, "oz": OZ_G}


def is_prime(n):
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def nice(value):
    """A quantity rounded to 3 significant figures, as a Fraction."""
    digits = len(str(int(value))) if value >= 1 else 1
    step = F(10) ** (digits - 3)
    return round(value / step) * step


def show(value):
    return f"{float(value):,g}" if value.denominator != 1 else f"{int(value):,}"


def m_largest(r):
    """Options share the whole part and start with one of two tenths, so the
    longer decimal is often the smaller one (0.5 against 0.45)."""
    whole, tenth = r.randint(0, 9), r.randint(1, 8)
    seen, opts = set(), []
    while len(opts) < 4:
        tail = "".join(str(r.randint(0, 9)) for _ in range(r.randint(0, 2)))
        frac = (str(r.choice([tenth, tenth + 1])) + tail).rstrip("0")
        value = F(f"{whole}.{frac}")
        if value not in seen:
            seen.add(value)
            opts.append((f"{whole}.{frac}", value))
    best = max(range(4), key=lambda k: opts[k][1])
    return "Which number is the largest?", opts, best, {}


def m_prime(r):
    prime = r.choice([n for n in range(51, 250, 2) if is_prime(n)])
    pool = [n for n in range(51, 250, 2) if not is_prime(n) and n % 5 and n % 3]
    opts = [(str(n), n) for n in [prime] + r.sample(pool, 3)]
    return "Which of these numbers is prime?", opts, 0, {}


def m_divisible(r):
    k = r.choice([3, 4, 6, 7, 8, 9, 11, 12])
    good = k * r.randint(100 // k + 1, 999 // k)
    pool = [n for n in range(good - 60, good + 61) if n % k and n > 99]
    opts = [(str(n), n) for n in [good] + r.sample(pool, 3)]
    return f"Which number is divisible by {k}?", opts, 0, {"k": k}


def m_measure(r, table, base, question):
    while True:
        units = r.sample(sorted(table), 4)
        opts = []
        for u in units:
            amount = nice(F(r.randint(*base)) / table[u])
            opts.append((f"{show(amount)} {u}", amount * table[u]))
        values = sorted(v for _, v in opts)
        if values[3] >= values[2] * F(21, 20):
            break
    best = max(range(4), key=lambda k: opts[k][1])
    return question, opts, best, {"units": units}


def m_longest(r):
    return m_measure(r, LENGTHS, (300, 5000), "Which distance is the longest?")


def m_heaviest(r):
    return m_measure(r, MASSES, (200, 5000), "Which mass is the heaviest?")


def m_weekday(r):
    start, n = r.randrange(7), r.randint(3, 60)
    right = (start + n) % 7
    others = r.sample([d for d in range(7) if d != right], 3)
    opts = [(DAYS[d], d) for d in [right] + others]
    question = f"If today is {DAYS[start]}, what day of the week will it be in {n} days?"
    return question, opts, 0, {"start": start, "n": n}


def geometry(shape, a, b):
    if shape == "rect-area":
        return a * b
    if shape == "rect-perimeter":
        return 2 * (a + b)
    if shape == "triangle-area":
        return F(a * b, 2)
    if shape == "hypotenuse":
        root = math.isqrt(a * a + b * b)
        if root * root != a * a + b * b:
            raise Problem(f"legs {a}, {b} give no whole hypotenuse")
        return F(root)
    if shape == "polygon-angles":
        return (a - 2) * 180
    raise Problem(f"unknown shape {shape}")


def m_geometry(r):
    shape = r.choice(["rect-area", "rect-perimeter", "triangle-area", "hypotenuse",
                      "polygon-angles"])
    if shape == "hypotenuse":
        (a, b), s = r.choice([(3, 4), (5, 12), (8, 15), (7, 24)]), r.randint(1, 4)
        a, b = a * s, b * s
        q = f"A right triangle has legs of {a} cm and {b} cm. How long is its hypotenuse?"
        unit = "cm"
    elif shape == "polygon-angles":
        a, b = r.randint(5, 12), 0
        q, unit = f"What is the sum of the interior angles of a polygon with {a} sides?", "°"
    elif shape == "triangle-area":
        a, b = r.randint(3, 19), r.randint(3, 19)
        q = f"A triangle has a base of {a} cm and a height of {b} cm. What is its area?"
        unit = "cm²"
    else:
        a, b = r.randint(3, 19), r.randint(3, 19)
        what = "area" if shape == "rect-area" else "perimeter"
        q = f"A rectangle measures {a} cm by {b} cm. What is its {what}?"
        unit = "cm²" if what == "area" else "cm"
    right = geometry(shape, a, b)
    if shape == "polygon-angles":
        wrong = {right - 180, right + 180, F(a * 180), F((a - 1) * 180), F(360)}
    else:
        wrong = {right * 2, right + a, right - 1, right + 10, F(a * b), F(2 * (a + b)),
                 F(a + b)}
    pool = sorted(w for w in wrong if w > 0 and w != right)
    picks = [right] + r.sample(pool, 3)
    opts = [(f"{show(v)} {unit}".replace(" °", "°"), v) for v in picks]
    return q, opts, 0, {"shape": shape, "a": a, "b": b}


def m_leap(r):
    leap = r.choice([y for y in range(1804, 2400, 4) if calendar.isleap(y)])
    pool = [y for y in range(1801, 2400) if not calendar.isleap(y)]
    traps = [y for y in (1900, 2100, 2200, 2300, 1800) if y in pool]
    others = r.sample(traps, 1) + r.sample(pool, 2)
    opts = [(str(y), y) for y in [leap] + others]
    return "Which of these years is a leap year?", opts, 0, {}


def solve_mc(kind, p, values):
    """The indices of the right options, from the parameters alone."""
    if kind in ("largest", "longest", "heaviest"):
        top = max(values)
        return [k for k, v in enumerate(values) if v == top]
    if kind == "prime":
        return [k for k, v in enumerate(values) if is_prime(v)]
    if kind == "divisible":
        return [k for k, v in enumerate(values) if v % p["k"] == 0]
    if kind == "weekday":
        return [k for k, v in enumerate(values) if v == (p["start"] + p["n"]) % 7]
    if kind == "geometry":
        return [k for k, v in enumerate(values) if v == geometry(p["shape"], p["a"], p["b"])]
    if kind == "leap":
        return [k for k, y in enumerate(values) if y % 4 == 0 and (y % 100 or y % 400 == 0)]
    raise Problem(f"unknown choice kind {kind}")


MC = [("largest", m_largest), ("prime", m_prime), ("divisible", m_divisible),
      ("longest", m_longest), ("heaviest", m_heaviest), ("weekday", m_weekday),
      ("geometry", m_geometry), ("leap", m_leap)]


def mc_task(r, i, letter):
    """Task i of the family, with its right option placed at `letter`."""
    kind, make = MC[i % len(MC)]
    question, opts, right, p = make(r)
    rest = [o for k, o in enumerate(opts) if k != right]
    r.shuffle(rest)
    pos = LETTERS.index(letter)
    ordered = rest[:pos] + [opts[right]] + rest[pos:]
    lines = [f"{LETTERS[k]}) {label}" for k, (label, _) in enumerate(ordered)]
    prompt = "\n".join([question] + lines + [LETTER_ONLY])
    check = {"kind": "choice", "expected": letter}
    meta = {"kind": kind, "p": p, "values": [v for _, v in ordered], "letter": letter}
    return (prompt, check, letter), meta
