"""The refused domain in words: which inputs a kernel raised on, described by the simplest rules that
hold for every refused input and for no accepted one ("refuses N = 1", "refuses masks").

Inputs are summarized as `Features` (what a rule can read); `describe(refused, accepted)` covers the
refused inputs greedily with `RULES`, each rule listed with its count, the kernel's error and a
minimal example. Refused inputs no rule explains are listed as such.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Features:
    B: int
    Hq: int
    Hkv: int
    Nq: int
    Nk: int
    d: int
    causal: object
    window: object
    mask: object
    values: str
    dtype: str

    @classmethod
    def of(cls, case, dtype: str) -> "Features":
        s = case.shape
        window = None if case.window is None else tuple(case.window)
        return cls(B=s.B, Hq=s.Hq, Hkv=s.Hkv, Nq=s.Nq, Nk=s.Nk, d=s.d, causal=case.causal, window=window,
                   mask=case.mask, values=case.values, dtype=dtype)

    @classmethod
    def from_dict(cls, data: dict) -> "Features":
        """Back from JSON (the window a list there)."""
        data = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if data.get("window") is not None:
            data["window"] = tuple(data["window"])
        return cls(**data)

    def size(self) -> int:
        return self.B * self.Hq * self.Nq * self.Nk * self.d


@dataclass(frozen=True)
class Rule:
    words: str
    test: object  # Features -> bool


def _rules(refused: list[Features]) -> list[Rule]:
    """Candidate rules, simplest first; thresholds and values come from the refused inputs themselves."""
    rules = [
        Rule("masks", lambda f: f.mask is not None),
        Rule("GQA (Hkv < Hq)", lambda f: f.Hkv != f.Hq),
        Rule("non-square causal (Nq != Nk)", lambda f: bool(f.causal) and f.Nq != f.Nk),
        Rule("causal", lambda f: bool(f.causal)),
        Rule("sliding windows", lambda f: f.window is not None),
        Rule("Nq != Nk", lambda f: f.Nq != f.Nk),
        Rule("N = 1", lambda f: min(f.Nq, f.Nk) == 1),
        Rule("Nq = 1", lambda f: f.Nq == 1),
        Rule("Nk = 1", lambda f: f.Nk == 1),
    ]
    for n in sorted({min(f.Nq, f.Nk) for f in refused}):
        if n > 1:
            rules.append(Rule(f"N <= {n}", lambda f, n=n: min(f.Nq, f.Nk) <= n))
    for n in sorted({max(f.Nq, f.Nk) for f in refused}, reverse=True):
        rules.append(Rule(f"N >= {n}", lambda f, n=n: max(f.Nq, f.Nk) >= n))
    for m in (8, 16, 32, 64, 128):
        rules.append(Rule(f"N not a multiple of {m}", lambda f, m=m: f.Nq % m != 0 or f.Nk % m != 0))
    for d in sorted({f.d for f in refused}):
        rules.append(Rule(f"head dim {d}", lambda f, d=d: f.d == d))
    for dtype in sorted({f.dtype for f in refused}):
        rules.append(Rule(dtype, lambda f, t=dtype: f.dtype == t))
    # then two conditions together ("GQA with Nq = 1"), for refusals no single condition separates
    single = list(rules)
    for n, a in enumerate(single):
        for b in single[n + 1:]:
            rules.append(Rule(f"{a.words} with {b.words}", lambda f, a=a, b=b: a.test(f) and b.test(f)))
    return rules


@dataclass(frozen=True)
class RefusedPart:
    words: str
    count: int
    error: str
    example: dict


def describe(refused: list[tuple[Features, str]], accepted: list[Features]) -> list[RefusedPart]:
    """Refused (features, error) inputs grouped by the simplest rules no accepted input satisfies."""
    left = list(refused)
    ok = set(accepted)
    parts = []
    rules = [r for r in _rules([f for f, _ in refused]) if not any(r.test(f) for f in ok)]
    while left:
        best = max(rules, key=lambda r: sum(r.test(f) for f, _ in left), default=None)
        hit = [] if best is None else [(f, e) for f, e in left if best.test(f)]
        if not hit:
            break
        parts.append(_part(best.words, hit))
        left = [(f, e) for f, e in left if not best.test(f)]
        rules.remove(best)
    if left:
        parts.append(_part("inputs no simple rule describes (accepted inputs share their features)", left))
    return parts


def _part(words: str, items) -> RefusedPart:
    f, error = min(items, key=lambda fe: fe[0].size())
    common = Counter(e for _, e in items).most_common(1)[0][0]
    return RefusedPart(words=words, count=len(items), error=common, example=asdict(f) | {"error": error})


def sentence(part: RefusedPart) -> str:
    ex = part.example
    shape = (f"B={ex['B']} Hq={ex['Hq']} Hkv={ex['Hkv']} Nq={ex['Nq']} Nk={ex['Nk']} d={ex['d']} "
             f"causal={ex['causal']} window={ex['window']} mask={ex['mask']} {ex['dtype']}")
    return f"refuses {part.words} ({part.count} inputs): {part.error}\n      e.g. {shape}"
