#!/usr/bin/env python3
"""Generates the task set `conclave eval` ships: eval/tasks.jsonl (320 tasks,
four families of 80: arithmetic, unit conversion, JSON extraction, multiple
choice) and eval/smoke.jsonl (the first 3 of each family).

Every task comes from a template (eval/families.py, eval/mc.py) filled by
`random.Random(2026)`, and every answer is computed there with exact
arithmetic, never written by hand; there is no outside data set. Output is
byte-identical from run to run.

    python3 eval/generate.py           # write eval/tasks.jsonl and eval/smoke.jsonl
    python3 eval/generate.py --check   # verify them; exits 1 on any problem

The check regenerates the set in memory and re-derives each answer by the
family's solver from the parameters the generator drew (for multiple
choice: exactly one option is right, and it is the stored letter). It checks
that each answer string parses back to the checked value, ids are unique,
prompts are under 400 characters and end as the family requires, letters
are balanced within +-5 across A-D, and that the files on disk are JSONL
(each line valid JSON, under 1 MiB) equal byte for byte to the regenerated
set.
"""

import argparse
import json
import math
import os
import random
import sys

from families import NUM_ONLY, Problem, arith_task, json_task, solve_arith
from families import solve_unit, unit_task
from mc import LETTER_ONLY, LETTERS, mc_task, solve_mc

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 2026
FAMILY_SIZE = 80
SMOKE_PER_FAMILY = 3
MAX_PROMPT = 400
MAX_LINE = 1 << 20
FAMILIES = ["arith", "units", "json", "mc"]
# The report's per-group accuracy reads `meta.group`.
GROUPS = {"arith": "arithmetic", "units": "unit conversion", "json": "JSON extraction",
          "mc": "multiple choice"}


def build():
    """All tasks in order, each as (task dict, meta for the check)."""
    r = random.Random(SEED)
    letters = list(LETTERS) * (FAMILY_SIZE // 4)
    r.shuffle(letters)
    out = []
    for family in FAMILIES:
        for i in range(FAMILY_SIZE):
            if family == "arith":
                (prompt, check, answer), meta = arith_task(r, i)
            elif family == "units":
                (prompt, check, answer), meta = unit_task(r, i)
            elif family == "json":
                (prompt, check, answer), meta = json_task(r, i)
            else:
                (prompt, check, answer), meta = mc_task(r, i, letters[i])
            task = {"id": f"{family}-{i + 1:03d}", "input": prompt, "check": check,
                    "answer": answer, "meta": {"group": GROUPS[family]}}
            out.append((task, meta))
    return out


def render(tasks):
    return "".join(json.dumps(t, ensure_ascii=False, sort_keys=False) + "\n" for t in tasks)


def smoke(tasks):
    return [t for t in tasks if int(t["id"].rsplit("-", 1)[1]) <= SMOKE_PER_FAMILY]


def type_ok(value, kind):
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return False


def check_task(task, problems):
    """Checks that need only the stored task."""
    tid, prompt, check, answer = task["id"], task["input"], task["check"], task["answer"]
    if len(prompt) >= MAX_PROMPT:
        problems.append(f"{tid}: prompt is {len(prompt)} characters")
    kind = check.get("kind")
    if kind == "number":
        if not prompt.endswith(NUM_ONLY):
            problems.append(f"{tid}: prompt does not ask for the number only")
        try:
            parsed = float(answer)
        except ValueError:
            problems.append(f"{tid}: answer {answer!r} is not a number")
            return
        if not math.isclose(parsed, check["expected"], abs_tol=1e-9):
            problems.append(f"{tid}: answer {answer} != expected {check['expected']}")
        if not 0.01 <= check["tolerance"]:
            problems.append(f"{tid}: tolerance {check['tolerance']} below 0.01")
    elif kind == "choice":
        if not prompt.endswith(LETTER_ONLY) or answer != check["expected"]:
            problems.append(f"{tid}: choice answer {answer!r} or prompt ending is wrong")
        if check["expected"] not in LETTERS:
            problems.append(f"{tid}: letter {check['expected']!r}")
    elif kind == "json_schema":
        try:
            parsed = json.loads(answer)
        except json.JSONDecodeError as err:
            problems.append(f"{tid}: answer is not JSON ({err})")
            return
        schema = check["schema"]
        if parsed != check["expected"]:
            problems.append(f"{tid}: answer JSON differs from expected")
        for field in schema["required"]:
            want = schema["properties"][field]["type"]
            if field not in parsed or not type_ok(parsed[field], want):
                problems.append(f"{tid}: field {field} missing or not {want}")
    else:
        problems.append(f"{tid}: unexpected check kind {kind!r}")


def check_meta(task, meta, problems):
    """Re-derives the answer from the parameters the generator drew."""
    tid, check, kind = task["id"], task["check"], meta["kind"]
    family = tid.split("-")[0]
    if family == "arith":
        want = float(solve_arith(kind, meta["p"]))
    elif family == "units":
        want = float(solve_unit(kind, meta["amount"]))
    elif family == "json":
        if check["expected"] != meta["expected"] or set(check["expected"]) != set(
                check["schema"]["required"]):
            problems.append(f"{tid}: expected fields differ from the drawn ones")
        return
    else:
        right = solve_mc(kind, meta["p"], meta["values"])
        if [LETTERS[k] for k in right] != [check["expected"]]:
            problems.append(f"{tid}: right options {right} but expected {check['expected']}")
        if len(set(map(str, meta["values"]))) != 4:
            problems.append(f"{tid}: options are not distinct")
        return
    if abs(want - check["expected"]) > 0.005 + 1e-9:
        problems.append(f"{tid}: solver gives {want}, stored {check['expected']}")


def check_file(path, want_text, problems):
    name = os.path.relpath(path, HERE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as err:
        problems.append(f"{name}: {err}")
        return []
    tasks = []
    for n, line in enumerate(raw.split(b"\n")[:-1], 1):
        if len(line) + 1 > MAX_LINE:
            problems.append(f"{name}:{n}: line is over 1 MiB")
        try:
            tasks.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            problems.append(f"{name}:{n}: not valid JSON ({err})")
    if raw != want_text.encode("utf-8"):
        problems.append(f"{name}: differs from the regenerated set (run without --check)")
    return tasks


def run_check():
    problems = []
    built = build()
    tasks = [t for t, _ in built]
    if render(tasks) != render([t for t, _ in build()]):
        problems.append("two generations in one process differ")
    ids = [t["id"] for t in tasks]
    if len(set(ids)) != len(ids):
        problems.append("ids are not unique")
    for family in FAMILIES:
        count = sum(1 for i in ids if i.startswith(family + "-"))
        if count != FAMILY_SIZE:
            problems.append(f"family {family} has {count} tasks")
    for task, meta in built:
        check_task(task, problems)
        check_meta(task, meta, problems)
    letters = [t["check"]["expected"] for t in tasks if t["check"]["kind"] == "choice"]
    counts = {x: letters.count(x) for x in LETTERS}
    mean = len(letters) / 4
    if any(abs(c - mean) > 5 for c in counts.values()):
        problems.append(f"letters are unbalanced: {counts}")
    for name, subset in (("tasks.jsonl", tasks), ("smoke.jsonl", smoke(tasks))):
        stored = check_file(os.path.join(HERE, name), render(subset), problems)
        for task in stored:
            check_task(task, problems)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{len(tasks)} tasks, {len(smoke(tasks))} in smoke, letters {counts}: "
          f"{'ok' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="verify the files instead of writing")
    args = ap.parse_args()
    try:
        if args.check:
            return run_check()
        tasks = [t for t, _ in build()]
    except Problem as err:
        print(f"generation failed: {err}", file=sys.stderr)
        return 1
    for name, subset in (("tasks.jsonl", tasks), ("smoke.jsonl", smoke(tasks))):
        with open(os.path.join(HERE, name), "w", encoding="utf-8", newline="\n") as f:
            f.write(render(subset))
    print(f"wrote {len(tasks)} tasks to eval/tasks.jsonl, {len(smoke(tasks))} to eval/smoke.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
