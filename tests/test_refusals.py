"""The refused domain is described by the simplest rule that holds for every refused input and for no
accepted one, with a minimal example; what no rule separates is said to be so."""
from flashcheck.refusals import Features, describe
from flashcheck.strategies import Shape


def f(Nq=17, Nk=17, d=64, Hq=2, Hkv=2, causal=False, mask=None, dtype="bfloat16"):
    return Features(shape=Shape(B=1, Hq=Hq, Hkv=Hkv, Nq=Nq, Nk=Nk, d=d), causal=causal, window=None, mask=mask,
                    values="normal", dtype=dtype)


ACCEPTED = [f(), f(Nq=65, Nk=130), f(Nq=1, Nk=17), f(d=128), f(causal=True), f(Hkv=1)]


def test_single_token_keys_are_named_with_a_minimal_example():
    refused = [(f(Nq=1, Nk=1), "RuntimeError: No available kernel"), (f(Nq=7, Nk=1, d=128), "RuntimeError: x")]
    (part,) = describe(refused, ACCEPTED)
    assert part.words == "Nk = 1" and part.count == 2  # Nq = 1 alone is accepted (Nq=1, Nk=17)
    assert part.example["shape"]["d"] == 64 and part.error == "RuntimeError: No available kernel"


def test_masks_and_non_square_causal_are_two_rules():
    refused = [(f(mask="random"), "e"), (f(mask="padding", Nq=1, Nk=1), "e"), (f(causal=True, Nq=65, Nk=130), "e")]
    assert [p.words for p in describe(refused, ACCEPTED + [f(causal=True, Nq=65, Nk=65)])] == \
        ["masks", "non-square causal (Nq != Nk)"]


def test_a_pair_of_conditions_when_no_single_one_separates():
    refused = [(f(Hkv=1, Nq=1, Nk=17), "e")]
    accepted = ACCEPTED[:2] + [f(Hkv=2, Nq=1, Nk=17), f(Hkv=1, Nq=65, Nk=65), f(Hkv=1, Nq=65, Nk=130)]
    (part,) = describe(refused, accepted)
    assert part.words == "GQA (Hkv < Hq) with N = 1"


def test_what_no_rule_separates_is_said_to_be_so():
    (part,) = describe([(f(), "e")], [f()])  # the same features were accepted once
    assert part.words.startswith("inputs no simple rule describes")


def test_gradients_refused_where_the_forward_runs_are_named_with_their_condition():
    """A kernel that runs GQA's forward but raises in its backward (the forward of the same input accepted):
    named "GQA with gradients", not "no simple rule"."""
    def grad(x):
        return Features(**{**x.__dict__, "backward": True})

    refused = [(grad(f(Hkv=1, Nq=1, Nk=17)), "RuntimeError: No available kernel"), (grad(f(Hkv=1, d=32)), "e")]
    accepted = ACCEPTED + [f(Hkv=1, Nq=1, Nk=17), f(Hkv=1, d=32), grad(f()), grad(f(Nq=1, Nk=17)), grad(f(d=32))]
    (part,) = describe(refused, accepted)
    assert part.words == "GQA (Hkv < Hq) with gradients" and part.count == 2
    assert part.example["backward"] is True
