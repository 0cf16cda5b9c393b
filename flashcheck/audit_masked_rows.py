"""Fully masked rows in the audit: the convention is O = 0, LSE = −inf, dQ row = 0, never NaN.

A row is fully masked through a boolean `mask` (a row of False) when the kernel declares "mask",
otherwise through causal with Nq > Nk (query rows i < Nq − Nk see no key) when it declares "causal"
with bottom-right alignment. A kernel declaring neither cannot be given such a row.
"""
from __future__ import annotations

import numpy as np

from flashcheck.audit_measure import torch_dtype

B, H, NQ, NK, D = 1, 2, 48, 32, 32
MASKED_ROWS = (0, 5, NQ - 1)


def _masked_call(kut, q, k, v, device):
    """(O, LSE, how, masked row indices), or None when the kernel can be given no such row.

    A boolean mask first; if the kernel rejects it (torch's flash backend takes no mask) and it
    declares bottom-right "causal", causal with Nq > Nk instead.
    """
    import torch

    first_error = None
    if "mask" in kut.supports:
        mask = torch.ones(B, H, NQ, NK, dtype=torch.bool, device=device)
        mask[:, :, list(MASKED_ROWS), :] = False
        try:
            o, lse = kut(q, k, v, mask=mask)
            return o, lse, "mask with rows of False", list(MASKED_ROWS)
        except Exception as exc:
            first_error = exc
    if "causal" in kut.supports and kut.domain.causal_alignment == "bottom_right":
        o, lse = kut(q, k, v, causal=True)
        how = "causal (bottom-right alignment), Nq > Nk"
        if first_error is not None:
            how += f" (a boolean mask raised {type(first_error).__name__})"
        return o, lse, how, list(range(NQ - NK))
    if first_error is not None:
        raise first_error
    return None


def check_masked_rows(kut, dtype: str, device: str, seed: int = 0) -> dict:
    """{"kernel", "dtype", "how", "ok", "problems", "skipped"} for one kernel and dtype."""
    import torch

    result = {"kernel": kut.name, "dtype": dtype, "how": None, "ok": None, "problems": [],
              "skipped": None}
    backward = "backward" in kut.supports
    g = torch.Generator().manual_seed(seed)
    shapes = ((B, H, NQ, D), (B, H, NK, D), (B, H, NK, D))
    q, k, v = (torch.randn(s, generator=g, dtype=torch.float64).to(device, torch_dtype(dtype))
               .requires_grad_(backward) for s in shapes)
    try:
        called = _masked_call(kut, q, k, v, device)
    except Exception as exc:
        result["skipped"] = f"kernel raised {type(exc).__name__}: {exc}"
        return result
    if called is None:
        result["skipped"] = "kernel declares neither 'mask' nor bottom-right 'causal'"
        return result
    o, lse, result["how"], rows = called
    problems = result["problems"]
    o64 = o.detach().to("cpu").double()
    if not torch.isfinite(o64).all():
        problems.append(f"O has {int((~torch.isfinite(o64)).sum())} NaN/Inf entries")
    masked_o = o64[:, :, rows]
    if not (masked_o == 0).all():
        problems.append(f"O of fully masked rows is not 0 (max |O| = "
                        f"{float(np.nanmax(masked_o.abs().numpy())):.3g}, NaN counts as wrong)")
    if lse is not None:
        l64 = lse.detach().to("cpu").double()[:, :, rows]
        if not (l64 == float("-inf")).all():
            vals = sorted({str(x) for x in l64.flatten().tolist()})[:3]
            problems.append(f"LSE of fully masked rows is not -inf (got {', '.join(vals)})")
    if backward:
        try:
            o.backward(torch.ones_like(o))
        except Exception as exc:
            problems.append(f"backward raised {type(exc).__name__}: {exc}")
        else:
            for name, t in zip(("dQ", "dK", "dV"), (q, k, v)):
                grad = t.grad.detach().to("cpu").double()
                if not torch.isfinite(grad).all():
                    problems.append(f"{name} has {int((~torch.isfinite(grad)).sum())} NaN/Inf")
            if not (q.grad.detach().to("cpu")[:, :, rows] == 0).all():
                problems.append("dQ of fully masked rows is not 0")
    result["ok"] = not problems
    return result
