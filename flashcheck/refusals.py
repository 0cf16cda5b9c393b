"""The refused domain in words: which inputs a kernel raised on, described by the simplest rules that
hold for every refused input and for no accepted one ("refuses N = 1", "refuses masks").

Inputs are summarized as `Features` (what a rule can read); `describe(refused, accepted)` covers the
refused inputs greedily with `RULES`, each rule listed with its count, the kernel's error and a
minimal example. Refused inputs no rule explains are listed as such.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from flashcheck.strategies import Shape


@dataclass(frozen=True)
class Features:
    """What a rule can read of one call: its case without the values' seed and scale, the dtype, and whether
    it was the backward (a kernel can run an input's forward and refuse its gradients)."""
    shape: Shape
    causal: object
    window: object
    mask: object
    values: str
    dtype: str
    backward: bool = False

    @classmethod
    def of(cls, case, dtype: str, backward: bool = False) -> "Features":
        window = None if case.window is None else tuple(case.window)
        return cls(shape=case.shape, causal=case.causal, window=window, mask=case.mask, values=case.values,
                   dtype=dtype, backward=backward)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Features":
        """Back from `to_dict`'s JSON (the window a list there)."""
        data = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        data["shape"] = Shape(**data["shape"])
        if data.get("window") is not None:
            data["window"] = tuple(data["window"])
        return cls(**data)

    def size(self) -> int:
        s = self.shape
        return s.B * s.Hq * s.Nq * s.Nk * s.d


@dataclass(frozen=True)
class Rule:
    words: str
    test: object  # Features -> bool


def _rules(refused: list[Features]) -> list[Rule]:
    """Candidate rules, simplest first; thresholds and values come from the refused inputs themselves."""
    rules = [
        Rule("masks", lambda f: f.mask is not None),
        Rule("GQA (Hkv < Hq)", lambda f: f.shape.Hkv != f.shape.Hq),
        Rule("non-square causal (Nq != Nk)", lambda f: bool(f.causal) and f.shape.Nq != f.shape.Nk),
        Rule("causal", lambda f: bool(f.causal)),
        Rule("sliding windows", lambda f: f.window is not None),
        Rule("Nq != Nk", lambda f: f.shape.Nq != f.shape.Nk),
        Rule("N = 1", lambda f: min(f.shape.Nq, f.shape.Nk) == 1),
        Rule("Nq = 1", lambda f: f.shape.Nq == 1),
        Rule("Nk = 1", lambda f: f.shape.Nk == 1),
        Rule("gradients", lambda f: f.backward),
    ]
    for n in sorted({min(f.shape.Nq, f.shape.Nk) for f in refused}):
        if n > 1:
            rules.append(Rule(f"N <= {n}", lambda f, n=n: min(f.shape.Nq, f.shape.Nk) <= n))
    for n in sorted({max(f.shape.Nq, f.shape.Nk) for f in refused}, reverse=True):
        rules.append(Rule(f"N >= {n}", lambda f, n=n: max(f.shape.Nq, f.shape.Nk) >= n))
    for m in (8, 16, 32, 64, 128):
        rules.append(Rule(f"N not a multiple of {m}", lambda f, m=m: f.shape.Nq % m != 0 or f.shape.Nk % m != 0))
    for d in sorted({f.shape.d for f in refused}):
        rules.append(Rule(f"head dim {d}", lambda f, d=d: f.shape.d == d))
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
    return RefusedPart(words=words, count=len(items), error=common, example=f.to_dict() | {"error": error})


def sentence(part: RefusedPart) -> str:
    ex, s = part.example, part.example["shape"]
    shape = (f"B={s['B']} Hq={s['Hq']} Hkv={s['Hkv']} Nq={s['Nq']} Nk={s['Nk']} d={s['d']} "
             f"causal={ex['causal']} window={ex['window']} mask={ex['mask']} {ex['dtype']}"
             + (" (its backward)" if ex.get("backward") else ""))
    return f"refuses {part.words} ({part.count} inputs): {part.error}\n      e.g. {shape}"
