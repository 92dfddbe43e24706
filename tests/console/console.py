"""The web console in a real browser (Debian's chromium through
chromium-driver, driven by selenium), against a gateway the Rust test
started on the demo config with keys (tests/it/console.rs).

Environment: BASE (the gateway), ADMIN_KEY, USER_KEY, SHOTS (where the
screenshots go). Each scenario runs in order in one browser; the first
failure is printed with the page's state and the script exits 1. Prints
`ok NAME` per scenario.
"""

import json
import os
import sys
import time
import traceback

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE = os.environ["BASE"]
ADMIN = os.environ["ADMIN_KEY"]
USER = os.environ["USER_KEY"]
SHOTS = os.environ.get("SHOTS")
WAIT = 30

# The demo's simulated answers (config/demo.toml).
ANSWERS = {
    "frontier": "Frontier answer: {q}",
    "second-opinion": "It depends on what you mean by {q}",
    "gemma-large": "A careful, complete answer from the large local model.",
}

# Each payload is a model's whole answer (tests/it/console.rs's mock);
# none may run, load or navigate.
PAYLOADS = {
    "xss-script": "<script>window.pwned = 'script'</script>",
    "xss-img": "<img src=x onerror=\"window.pwned = 'img'\">",
    "xss-link": "[click me](javascript:window.pwned='link') and <a href=\"javascript:window.pwned='a'\">this</a>",
    "xss-svg": "<svg onload=\"window.pwned = 'svg'\"><script>window.pwned = 'svg2'</script></svg>",
}


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1440,1000", "--no-first-run", "--disable-extensions",
              "--disable-background-networking", "--disable-sync"]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    d = webdriver.Chrome(service=service, options=opts)
    d.set_page_load_timeout(WAIT)
    d.set_script_timeout(WAIT)
    return d


class Page:
    def __init__(self, d):
        self.d = d

    def tid(self, name):
        return f'[data-testid="{name}"]'

    def one(self, name, timeout=WAIT):
        return WebDriverWait(self.d, timeout).until(
            lambda d: next(iter(d.find_elements(By.CSS_SELECTOR, self.tid(name))), None),
            f"no element {name}")

    def all(self, name):
        return self.d.find_elements(By.CSS_SELECTOR, self.tid(name))

    def until(self, what, check, timeout=WAIT):
        # A page re-rendering under a check is not a failure: check again.
        return WebDriverWait(self.d, timeout, poll_frequency=0.1,
                             ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: check(), what)

    def visible(self, name, timeout=WAIT):
        return self.until(f"{name} visible", lambda: next(
            (e for e in self.all(name) if e.is_displayed()), None), timeout)

    def go(self, hash_):
        self.one(f"nav-{hash_}").click()

    def shot(self, name):
        if SHOTS:
            os.makedirs(SHOTS, exist_ok=True)
            # The whole page's height, so nothing is cut off.
            h = self.d.execute_script("return Math.min(4000, document.documentElement.scrollHeight)")
            self.d.set_window_size(1440, max(900, h))
            time.sleep(0.2)
            self.d.save_screenshot(os.path.join(SHOTS, f"console-{name}.png"))
            self.d.set_window_size(1440, 1000)

    def sign_in(self, key):
        self.d.get(BASE + "/console")
        if self.all("nav-battle") and self.one("nav-battle").is_displayed():
            self.d.find_element(By.ID, "signout").click()
        self.visible("key-input").send_keys(key)
        self.one("key-submit").click()
        self.visible("nav-battle")

    def api_calls(self):
        return self.d.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
            ".filter(n => !n.includes('/console'))")


def login(p):
    p.d.get(BASE + "/console")
    p.visible("key-input")
    time.sleep(0.5)
    assert p.api_calls() == [], f"API calls before a key: {p.api_calls()}"
    assert not p.one("nav-battle").is_displayed(), "navigation shown before a key"
    p.shot("login")
    p.one("key-input").send_keys("sk-wrong-key")
    p.one("key-submit").click()
    msg = p.until("the refusal", lambda: p.one("key-error").text.strip() or None)
    assert "refused" in msg and "Incorrect API key" in msg, msg
    assert not p.one("nav-battle").is_displayed()
    stored = p.d.execute_script("return sessionStorage.length")
    assert stored == 0, "a refused key was kept"
    assert p.d.get_cookies() == [], "the console set a cookie"


def battle(p, picks=("frontier", "second-opinion", "gemma-large"), route="ab", shot=True):
    p.go("battle")
    Select(p.one("battle-route")).select_by_value(route)
    p.until("the contestants", lambda: set(picks) <= {b.get_attribute("value") for b in p.all("battle-model")})
    for box in p.all("battle-model"):
        if box.get_attribute("value") in picks and not box.is_selected():
            box.click()
    q = f"battle question {time.time():.0f}"
    p.one("battle-prompt").send_keys(q)
    p.one("battle-send").click()
    p.until("every column done", lambda: len(p.all("battle-column")) == len(picks) and all(
        c.get_attribute("data-done") for c in p.all("battle-column")), timeout=60)
    texts = [c.text.strip() for c in p.all("battle-column")]
    return q, texts


def battle3(p):
    q, texts = battle(p)
    expected = {m: a.format(q=q) for m, a in ANSWERS.items()}
    assert sorted(texts) == sorted(expected.values()), f"columns {texts} != {expected}"
    for s in p.all("battle-stats"):
        assert s.text.startswith("TTFT "), s.text
    # Rank the three: what C answered best, then A, then B.
    assert len(p.all("rank-item")) == 3
    order = ["C", "A", "B"]
    lst = p.one("rank-list")
    for letter in reversed(order):
        item = next(i for i in p.all("rank-item") if i.get_attribute("data-letter") == letter)
        p.d.execute_script("arguments[0].prepend(arguments[1])", lst, item)
    p.one("vote-rank").click()
    reveal = p.visible("reveal")
    p.until("the reveal", lambda: "was" in reveal.text)
    names = [n.text for n in p.all("battle-model-name")]
    by_answer = {a: m for m, a in expected.items()}
    for col, name in zip(p.all("battle-column"), names):
        assert by_answer[col.text.strip()] == name, f"{name} revealed for {col.text!r}"
    assert all(v.get_attribute("disabled") is not None for v in p.all("vote-A")), "could vote twice"
    Select(p.one("diff-a")).select_by_value("A")
    Select(p.one("diff-b")).select_by_value("B")
    p.one("diff-show").click()
    diff = p.until("the diff", lambda: next(
        (e.text for e in p.all("diff-view") if e.is_displayed()), None))
    assert "- " in diff and "+ " in diff, diff
    p.shot("battle")
    winner = names[2]
    p.go("leaderboard")
    Select(p.one("leaderboard-route")).select_by_value("ab")
    p.until("leaderboard rows", lambda: len(p.all("leaderboard-row")) == 3)
    rows = [r.text for r in p.all("leaderboard-row")]
    assert rows[0].split()[1] == winner, f"{winner} should lead: {rows}"
    first = rows[0].split()
    # rank, model, rating, lo, –, hi, votes 2, wins 2, losses 0
    assert first[6:9] == ["2", "2", "0"], rows
    p.one("leaderboard-chart")
    p.shot("leaderboard")


def six(p):
    picks = [f"six-{i}" for i in range(1, 7)]
    q, texts = battle(p, picks=picks, route="six", shot=False)
    assert len(texts) == 6 and all(t.startswith("token") and len(t) > 400 for t in texts), texts
    p.one("vote-tie").click()
    p.until("the reveal", lambda: "was" in p.visible("reveal").text)


def partial(p):
    picks = ["six-1", "six-2", "broken"]
    battle(p, picks=picks, route="partial")
    # The contestant that failed is out of the battle: two letters to vote on.
    assert p.all("vote-A") and p.all("vote-B") and not p.all("vote-C"), "a vote for the absent column"
    p.one("vote-B").click()
    reveal = p.visible("reveal")
    p.until("the reveal", lambda: "was" in reveal.text)
    assert "six-1" in reveal.text and "six-2" in reveal.text and "broken" not in reveal.text, reveal.text


def cached(p):
    p.go("playground")
    details = p.one("playground-params").find_element(By.XPATH, "./ancestor::details")
    if not details.get_attribute("open"):
        details.find_element(By.TAG_NAME, "summary").click()
    params = p.visible("playground-params")
    params.clear()
    params.send_keys('{"temperature": 0}')
    q = f"cache me {time.time_ns()}"
    first, _ = playground(p, "fast", q)
    assert not p.all("timeline-cached"), "the first is a miss"
    again, attempts = playground(p, "fast", q)
    assert again == first, (again, first)
    p.one("timeline-cached")
    assert not attempts, f"a hit makes no attempt: {attempts}"
    events = " ".join(e.text for e in p.all("timeline-event"))
    assert "route's cache" in events, events
    params.clear()


def playground(p, route, prompt, live=False):
    p.go("playground")
    Select(p.one("playground-route")).select_by_value(route)
    box = p.one("playground-prompt")
    box.clear()
    box.send_keys(prompt)
    before = [a.get_attribute("data-request-id") for a in p.all("playground-answer")]
    send = p.one("playground-send")
    p.until("the send button", lambda: send.is_enabled())
    send.click()

    def started():
        a = p.all("playground-answer")
        return a and a[0].get_attribute("data-request-id") not in before and a[0]
    rid = p.until("the request", started).get_attribute("data-request-id")
    if live:
        # While it runs, its record so far.
        p.until("the running record", lambda: any(
            t.get_attribute("data-request-id") == rid and t.get_attribute("data-status") == "running"
            for t in p.all("timeline")), timeout=20)
    p.until("the answer", lambda: p.one("playground-answer").get_attribute("data-done"), timeout=60)

    def finished():
        t = p.all("timeline")
        return t and t[0].get_attribute("data-request-id") == rid and t[0].get_attribute("data-status") != "running"
    p.until("the request's finished record", finished, timeout=60)
    return p.one("playground-answer").text, [a.text for a in p.all("timeline-attempt")]


def chain(p):
    answer, attempts = playground(p, "review", "explain the chain", live=True)
    assert answer.strip() == ANSWERS["gemma-large"], answer
    draft = next(a for a in attempts if a.startswith("qwen-small"))
    assert "escalate" in draft and "This is only a draft" in draft, draft
    assert any(a.startswith("gemma-large") and "accept" in a for a in attempts), attempts
    assert any(a.startswith("verifier") and "escalate" in a for a in attempts), attempts
    p.shot("playground")


def panel(p):
    answer, attempts = playground(p, "council", "which is right")
    # The panel's guidance goes to the default model, which answers.
    assert answer.strip() == "Frontier answer: which is right", answer
    events = " ".join(e.text for e in p.all("timeline-event"))
    assert "judge ranking" in events.lower() and "answers the question" in events and "hedges" in events, events
    assert any("winner" in a for a in attempts) and any("loser" in a for a in attempts), attempts


def requests_page(p):
    p.go("playground")
    answer, _ = playground(p, "fast", "find me in the requests list")
    rid = p.one("playground-status").text.split("·")[-1].strip()
    assert rid.startswith("console-"), rid
    p.go("requests")
    p.until("the request in the list", lambda: any(
        r.get_attribute("data-id") == rid for r in p.all("requests-row")))
    row = next(r for r in p.all("requests-row") if r.get_attribute("data-id") == rid)
    assert "fast" in row.text and "200" in row.text, row.text
    row.click()
    p.until("its time line", lambda: p.all("timeline-attempt"))
    p.shot("requests")
    p.go("keys")
    p.until("key rows", lambda: len(p.all("keys-row")) >= 2)
    p.until("today's usage", lambda: p.all("usage-route-row"))
    p.shot("keys")


def refused(p):
    for page in ["requests", "keys"]:
        p.go(page)
        # Read inside the wait: the page may re-render the notice under it.
        msg = p.until("the admin refusal", lambda: next(
            (e.text for e in p.all("admin-refused") if e.is_displayed()), None))
        assert "admin key" in msg, msg
        assert not p.all("requests-row") and not p.all("keys-row")


def xss(p):
    p.go("playground")
    for trigger, payload in PAYLOADS.items():
        answer, attempts = playground(p, "xss", trigger)
        assert answer.strip() == payload, f"{trigger}: shown {answer!r}"
        box = p.one("playground-answer")
        side = p.one("playground-timeline")
        for where in (box, side):
            for tag in ["script", "img", "svg", "iframe", "object"]:
                assert not where.find_elements(By.TAG_NAME, tag), f"{trigger}: a <{tag}> was made"
            for a in where.find_elements(By.TAG_NAME, "a"):
                href = a.get_attribute("href") or ""
                assert href.startswith(("http:", "https:", "mailto:")), f"{trigger}: link {href}"
        got = p.d.execute_script("return window.pwned")
        assert got is None, f"{trigger}: ran ({got})"
    p.shot("xss")


def long_answer(p):
    answer, _ = playground(p, "long", "the long one")
    assert len(answer.strip()) >= 100_000, len(answer)
    # Still usable: the page answers a click at once.
    t = time.time()
    p.go("leaderboard")
    p.one("leaderboard-route")
    assert time.time() - t < 10, "the page hung after a long answer"


def main():
    d = browser()
    p = Page(d)
    steps = [
        ("login", lambda: login(p)),
        ("sign in", lambda: p.sign_in(USER)),
        ("battle of three, ranked, revealed, leaderboard", lambda: battle3(p)),
        ("six columns streaming", lambda: six(p)),
        ("a contestant down", lambda: partial(p)),
        ("chain in the playground", lambda: chain(p)),
        ("judge panel ranking", lambda: panel(p)),
        ("a cache hit in the playground", lambda: cached(p)),
        ("non-admin refused on admin pages", lambda: refused(p)),
        ("xss payloads inert", lambda: xss(p)),
        ("100k-character answer", lambda: long_answer(p)),
        ("admin: requests list and keys", lambda: (p.sign_in(ADMIN), requests_page(p))),
    ]
    # `ONLY=chain,xss` (or arguments) runs just those scenarios.
    only = set(sys.argv[1:]) | {o for o in os.environ.get("ONLY", "").split(",") if o}
    try:
        for name, step in steps:
            if only and not any(o in name for o in only) and name not in ("sign in",):
                continue
            t = time.time()
            try:
                step()
            except (AssertionError, TimeoutException, StopIteration, StaleElementReferenceException) as e:
                print(f"FAILED {name}: {type(e).__name__}: {e}")
                print("page text:", d.find_element(By.TAG_NAME, "body").text[:3000])
                logs = [l for l in d.get_log("browser")][-20:]
                print("browser log:", json.dumps(logs, indent=1)[:3000])
                if SHOTS:
                    d.save_screenshot(os.path.join(SHOTS, "failed.png"))
                traceback.print_exc()
                sys.exit(1)
            print(f"ok {name} ({time.time() - t:.1f}s)", flush=True)
        # Expected refusals: the wrong key (401), a non-admin key (403), and
        # a record asked for before its request reached the gateway (404).
        def expected(m):
            return ("status of 401" in m or "status of 403" in m
                    or ("/v1/requests/console-" in m and "status of 404" in m))
        errors = [l for l in d.get_log("browser") if l.get("level") == "SEVERE"
                  and not expected(l.get("message", ""))]
        if errors:
            print("FAILED browser errors:", json.dumps(errors, indent=1)[:3000])
            sys.exit(1)
    finally:
        d.quit()


if __name__ == "__main__":
    main()
