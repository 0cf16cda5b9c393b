"""One measurement of the audit: run a kernel on one input, compare with the float64 reference
computed from the exact values the kernel received, and set the error next to the derived bound.

The parts it reads (flashcheck.adapters, reference, flashcheck.proofs.bounds) come from `components()`.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from flashcheck.audit_inputs import make_inputs
from flashcheck.strategies import Shape

BOUND_KINDS = ("probabilistic", "worst_case")
FORWARD_QUANTITIES = ("o", "lse")
BACKWARD_QUANTITIES = ("dq", "dk", "dv")


@dataclass(frozen=True)
class Case:
    kernel: str
    dtype: str
    distribution: str
    sweep: str  # "N" | "logit_scale" | "published"
    B: int
    H: int
    N: int
    d: int
    logit_scale: float = 1.0
    seed: int = 0

    @property
    def shape(self) -> Shape:
        return Shape(self.B, self.H, self.H, self.N, self.N, self.d)

    def label(self) -> str:
        return (f"{self.kernel} {self.dtype} {self.distribution} N={self.N} d={self.d} "
                f"c={self.logit_scale:g}")


def torch_dtype(name: str):
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
            "float64": torch.float64}[name]


def components() -> dict:
    """{part: (what the audit uses, "")} for the parts it reads (every one required)."""
    from flashcheck import reference
    from flashcheck import adapters
    from flashcheck.proofs import bounds

    def ref(q, k, v, do, *, backward):
        o, lse = reference.attention(q, k, v)
        grads = reference.attention_backward(q, k, v, o, lse, do) if backward else (None,) * 3
        return (np.asarray(o), np.asarray(lse), *grads)

    return {"flashcheck.adapters": (adapters.resolve, ""), "reference": (ref, ""), "flashcheck.proofs.bounds": (bounds, "")}


def bounds_for(bounds, q, k, v, do, precision, *, backward: bool, kinds=BOUND_KINDS):
    """({kind: {quantity: elementwise bound}}, notes): the quantities whose bound could not be
    computed are left out and the reason is in `notes`."""
    out, notes = {kind: {} for kind in kinds}, []
    for kind in kinds:
        try:
            fb = bounds.forward_bound(q, k, v, precision=precision, kind=kind)
            out[kind].update(o=np.asarray(fb.o), lse=np.asarray(fb.lse))
        except Exception as exc:
            notes.append(f"forward_bound({kind}) failed: {type(exc).__name__}: {exc}")
        if backward:
            try:
                bb = bounds.backward_bound(q, k, v, do, precision=precision, kind=kind)
                out[kind].update(dq=np.asarray(bb.dq), dk=np.asarray(bb.dk), dv=np.asarray(bb.dv))
            except Exception as exc:
                notes.append(f"backward_bound({kind}) failed: {type(exc).__name__}: {exc}")
    return out, notes


def error_stats(got, ref, bounds_by_kind: dict | None) -> dict:
    """Relative error ||err|| / ||ref||, max-abs error, and max elementwise error / bound per kind.

    NaN/Inf in the kernel's output are counted and make the ratio infinite. Entries where the
    reference is infinite (LSE of a fully masked row) must match exactly.
    """
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    finite_ref = np.isfinite(ref)
    nonfinite = int(np.count_nonzero(~np.isfinite(got) & finite_ref))
    mismatched_inf = int(np.count_nonzero(~finite_ref & (got != ref)))
    ok = finite_ref & np.isfinite(got)
    err = np.where(ok, np.abs(got - np.where(ok, ref, 0.0)), 0.0)
    ref_norm = float(np.linalg.norm(np.where(finite_ref, ref, 0.0)))
    err_norm = float(np.linalg.norm(err))
    rel = err_norm / ref_norm if ref_norm > 0 else err_norm
    stats = {
        # NaN when the kernel returned NaN/Inf (no error norm is meaningful); the norm over the
        # finite entries alone is kept next to it.
        "rel_err": float("nan") if nonfinite or mismatched_inf else rel,
        "rel_err_finite": rel,
        "max_abs": float(err.max(initial=0.0)),
        "ref_norm": ref_norm,
        "nonfinite": nonfinite,
        "mismatched_inf": mismatched_inf,
        "ratio": {},
        "bound_rel": {},
    }
    for kind, bound in (bounds_by_kind or {}).items():
        bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), err.shape)
        stats.setdefault("bound_nan", {})[kind] = int(np.count_nonzero(np.isnan(bound) & ok))
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(err == 0, 0.0, err / bound)
        worst = float(np.nanmax(np.where(ok, r, 0.0), initial=0.0))
        if nonfinite or mismatched_inf:
            worst = float("inf")
        elif stats["bound_nan"][kind]:
            worst = float("nan")  # the bound itself is undefined here: no verdict
        stats["ratio"][kind] = worst
        # The bound expressed like the error: ||bound|| / ||ref||, to draw next to rel_err.
        b = np.where(finite_ref, bound, 0.0)
        stats["bound_rel"][kind] = float(np.linalg.norm(b)) / ref_norm if ref_norm > 0 else None
    return stats


def _run_kernel(kut, tensors, do_t, backward: bool):
    """Call the kernel (forward, then backward through autograd when declared).

    Returns float64 numpy (o, lse|None, dq, dk, dv), the seconds it took, and the backward's
    exception message (the forward errors are still reported when only the backward fails).
    """
    t0 = time.perf_counter()
    o, lse = kut(*tensors)
    grads, backward_error = (None, None, None), None
    if backward:
        try:
            o.backward(do_t)
            grads = tuple(t.grad for t in tensors)
        except Exception as exc:
            backward_error = f"backward raised {type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - t0
    as_np = lambda t: None if t is None else t.detach().to("cpu").double().numpy()  # noqa: E731
    return (as_np(o), as_np(lse), *map(as_np, grads)), seconds, backward_error


def measure(kut, case: Case, device: str, parts: dict, kinds=BOUND_KINDS, cache=None) -> dict:
    """The audit record of one (kernel, dtype, distribution, N, logit scale) point.

    `cache` (a dict) keeps the reference and the bounds of the last input across calls: every
    kernel gets the same rounded inputs for the same case, so measuring kernels one after the other
    on one case computes the (slow, float64) reference once and each distinct precision's bound once.
    """
    import torch

    cache = {} if cache is None else cache
    if case.sweep == "published":  # errors only: bounds at N=2048 cost minutes per precision
        kinds = ()
    record = {"case": asdict(case), "quantities": {}, "flags": [], "error": None}
    backward = "backward" in kut.supports
    q, k, v, do = make_inputs(case.shape, case.distribution, case.seed, case.logit_scale)
    dtype = torch_dtype(case.dtype)
    tensors = [torch.tensor(x, dtype=dtype, device=device).requires_grad_(backward)
               for x in (q, k, v)]
    do_t = torch.tensor(do, dtype=dtype, device=device)
    # The exact values the kernel received (rounded to its dtype): the reference's inputs.
    qe, ke, ve, doe = (t.detach().to("cpu").double().numpy() for t in (*tensors, do_t))
    for name, x in zip("qkv", (qe, ke, ve)):
        if not np.all(np.isfinite(x)):
            record["flags"].append(f"input {name} not finite in {case.dtype} at this logit scale")
    try:
        with np.errstate(all="ignore"):  # the Triton interpreter's NumPy warnings; NaN is flagged
            got, record["kernel_seconds"], backward_error = _run_kernel(kut, tensors, do_t,
                                                                        backward)
    except Exception as exc:
        if not backward:
            record["error"] = f"kernel raised {type(exc).__name__}: {exc}"
            return record
        # Some kernels refuse inputs that require grad (eager flex on the CPU): forward alone.
        backward_error = f"with gradients the kernel raised {type(exc).__name__}: {exc}"
        try:
            with np.errstate(all="ignore"):
                got, record["kernel_seconds"], _ = _run_kernel(
                    kut, [t.detach() for t in tensors], do_t, False)
        except Exception as exc2:
            record["error"] = f"kernel raised {type(exc2).__name__}: {exc2}"
            return record
    if backward_error:
        record["error"] = backward_error
        backward = False
    key = (case.dtype, case.distribution, case.B, case.H, case.N, case.d, case.logit_scale,
           case.seed, backward)
    if cache.get("key") != key:
        cache.clear()
        cache["key"] = key
    reference, why = parts["reference"]
    if reference is None:
        raise RuntimeError(why)
    if "ref" not in cache:
        cache["ref"] = reference(qe, ke, ve, doe, backward=backward)
    ref = cache["ref"]
    bounds_module, why = parts["flashcheck.proofs.bounds"]
    bounds = None
    if not kinds:
        pass
    elif bounds_module is None:
        record["bounds_missing"] = why
    else:
        try:
            precision = kut.precision(dtype, head_dim=case.d)  # the tiles (block_k) follow d
        except Exception as exc:
            record["bounds_missing"] = f"no precision model: {type(exc).__name__}: {exc}"
        else:
            record["precision"] = repr(precision)
            if ("bounds", repr(precision)) not in cache:
                with np.errstate(all="ignore"):  # NaN bounds are counted and reported instead
                    cache["bounds", repr(precision)] = bounds_for(
                        bounds_module, qe, ke, ve, doe, precision, backward=backward,
                        kinds=kinds)
            bounds, notes = cache["bounds", repr(precision)]
            if notes:
                record["bounds_missing"] = "; ".join(notes)
    names = FORWARD_QUANTITIES + (BACKWARD_QUANTITIES if backward else ())
    for i, name in enumerate(names):
        if got[i] is None:  # LSE not returned by this kernel
            continue
        per_kind = {kind: b[name] for kind, b in (bounds or {}).items() if name in b}
        s = error_stats(got[i], ref[i], per_kind)
        record["quantities"][name] = s
        if s["nonfinite"]:
            record["flags"].append(f"{name}: {s['nonfinite']} NaN/Inf entries from finite inputs")
        if any(s.get("bound_nan", {}).values()):
            record["flags"].append(f"{name}: the bound is NaN at {max(s['bound_nan'].values())} "
                                   "entries (flashcheck.proofs.bounds) — no verdict")
        if s["mismatched_inf"]:
            record["flags"].append(f"{name}: {s['mismatched_inf']} entries differ where the "
                                   "reference is infinite")
    return record
