"""Third-party attention kernels behind one interface: the kernel under test.

`resolve(target)` turns a target string into a `KernelUnderTest`:

- ``"ours"``: `kernels.attention` (the Triton kernel; on the CPU it needs ``TRITON_INTERPRET=1``);
- ``"torch-sdpa-math"``, ``"torch-sdpa-flash"``, ``"torch-sdpa-efficient"``, ``"torch-sdpa-cudnn"``:
  `torch.nn.functional.scaled_dot_product_attention` pinned to one backend with
  `torch.nn.attention.sdpa_kernel`;
- ``"flex"``: `torch.nn.attention.flex_attention` (compiled on the GPU only);
- ``"package.module:function"`` or ``"path/to/file.py:function"``: a user callable, called as
  ``fn(q, k, v, **kw)`` with only the declared capabilities in ``kw``; it returns O, or (O, LSE) when
  ``"lse"`` is declared.

Every kernel takes and returns (B, H, N, d) tensors; a ``layout="bnhd"`` kernel gets (B, N, H, d)
tensors and its outputs are transposed back. Masks are always (B, Hq, Nq, Nk)-broadcastable booleans,
True = attend. `precision(dtype)` states the arithmetic the kernel performs, the input of the derived
error bound (`proofs.bounds.Precision`).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable

CAPABILITIES = frozenset({"causal", "scale", "gqa", "lse", "backward", "mask", "window"})
LAYOUTS = ("bhnd", "bnhd")
SDPA_BACKENDS = {
    "torch-sdpa-math": "MATH",
    "torch-sdpa-flash": "FLASH_ATTENTION",
    "torch-sdpa-efficient": "EFFICIENT_ATTENTION",
    "torch-sdpa-cudnn": "CUDNN_ATTENTION",
}
BUILTINS = ("ours", *SDPA_BACKENDS, "flex")


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _precision(**fields):
    """A `proofs.bounds.Precision` (imported lazily: proofs/ is another part of the project)."""
    from proofs.bounds import Precision

    return Precision(**fields)


def _half_dot(dtype_name: str) -> str | None:
    return {"float16": "fp16", "bfloat16": "bf16"}.get(dtype_name)


@dataclass(eq=False)
class KernelUnderTest:
    """One attention kernel, callable in the project's conventions.

    `fn(q, k, v, *, causal, scale, window, mask)` receives (B, H, N, d) tensors already in the
    kernel's layout and only the capabilities it declares, and returns (O, LSE or None) in that layout.
    """

    name: str
    supports: frozenset
    fn: Callable
    layout: str = "bhnd"
    precision_fn: Callable | None = None
    availability_fn: Callable | None = None
    head_dims: frozenset | None = None  # None = any head dimension
    notes: dict = field(default_factory=dict)

    def __repr__(self):
        return f"KernelUnderTest({self.name!r}, supports={','.join(sorted(self.supports)) or 'nothing'})"

    def _repr_pretty_(self, printer, cycle):  # hypothesis's falsifying-example printer
        printer.text(repr(self))

    def available(self, device: str, dtype) -> str | None:
        """None when the kernel can run on `device` in `dtype`, else the reason it cannot."""
        import torch

        if device.startswith("cuda") and not torch.cuda.is_available():
            return "CUDA is not available on this machine"
        if self.availability_fn is not None:
            return self.availability_fn(device, dtype)
        return None

    def accepts(self, d: int) -> bool:
        return self.head_dims is None or d in self.head_dims

    def __call__(self, q, k, v, *, causal=False, scale=None, window=None, mask=None):
        kw = {}
        for cap, value, unset in (("causal", causal, False), ("scale", scale, None),
                                  ("window", window, None), ("mask", mask, None)):
            if value is unset or (cap == "window" and value == (None, None)):
                continue
            if cap not in self.supports:
                raise ValueError(f"{self.name} does not declare {cap!r}; got {cap}={value!r}")
            kw[cap] = value
        if q.shape[1] != k.shape[1] and "gqa" not in self.supports:
            raise ValueError(f"{self.name} does not declare 'gqa'; got Hq={q.shape[1]}, Hkv={k.shape[1]}")
        if self.layout == "bnhd":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = self.fn(q, k, v, **kw)
        o, lse = (out if isinstance(out, (tuple, list)) else (out, None))[:2]
        if self.layout == "bnhd":
            o = o.transpose(1, 2)
            B, Nq, Hq = q.shape[:3]
            if lse is not None and tuple(lse.shape) == (B, Nq, Hq) and Nq != Hq:
                lse = lse.transpose(1, 2)
        if "lse" not in self.supports:
            lse = None
        return o, lse

    def precision(self, dtype, dot_precision=None, *, head_dim=None):
        """The arithmetic the kernel performs in `dtype` (a `proofs.bounds.Precision`); its tiling may
        depend on the head dimension."""
        if self.precision_fn is None:
            raise ValueError(f"{self.name}: no precision model is known")
        if head_dim is not None and "head_dim" in inspect.signature(self.precision_fn).parameters:
            return self.precision_fn(dtype, dot_precision, head_dim=head_dim)
        return self.precision_fn(dtype, dot_precision)


def parse_supports(supports: Iterable[str] | str | None) -> frozenset | None:
    if supports is None:
        return None
    if isinstance(supports, str):
        supports = [s for s in supports.replace(" ", "").split(",") if s]
    supports = frozenset(supports)
    unknown = supports - CAPABILITIES
    if unknown:
        raise ValueError(f"supports: unknown capabilities {sorted(unknown)}; expected a subset of "
                         f"{sorted(CAPABILITIES)}")
    return supports


def resolve(target: str, *, supports: Iterable[str] | str | None = None, layout: str | None = "bhnd"
            ) -> KernelUnderTest:
    """The kernel named by `target` (see the module docstring); `supports` overrides what it declares.

    A user function may declare its own defaults as attributes: `fn.supports` ("causal,lse,..."),
    `fn.layout` (used when `layout` is None), `fn.precision(dtype)` and `fn.head_dims`.
    """
    if not isinstance(target, str) or not target:
        raise ValueError(f"target: expected a built-in name {BUILTINS}, 'package.module:function' or "
                         f"'path/to/file.py:function', got {target!r}")
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    declared = parse_supports(supports)
    if target in BUILTINS and layout not in (None, "bhnd"):
        raise ValueError(f"layout: the built-in kernel {target} takes (B, H, N, d) tensors (bhnd), got {layout!r}")
    if target == "ours":
        kut = _ours()
    elif target in SDPA_BACKENDS:
        kut = _sdpa(target)
    elif target == "flex":
        kut = _flex()
    elif ":" in target:
        kut = _user(target, declared, layout)
    else:
        raise ValueError(f"target: unknown kernel {target!r}; expected one of {BUILTINS}, "
                         f"'package.module:function' or 'path/to/file.py:function'")
    if declared is not None and target in BUILTINS:
        extra = declared - kut.supports
        if extra:
            raise ValueError(f"supports: {target} does not support {sorted(extra)} "
                             f"(it supports {sorted(kut.supports)})")
        kut.supports = declared
    return kut


# ---- user callables -------------------------------------------------------------------------------

def load_callable(target: str) -> Callable:
    """`package.module:function` or `path/to/file.py:function`."""
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise ValueError(f"target: expected 'package.module:function' or 'path/to/file.py:function', "
                         f"got {target!r}")
    if where.endswith(".py") or os.sep in where or "/" in where:
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise ValueError(f"target: no such file {where!r}")
        mod_name = "flashcheck_user_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ValueError(f"target: cannot import module {where!r}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"target: {where!r} has no callable {attr!r}")
    return fn


def _user(target: str, supports: frozenset | None, layout: str | None) -> KernelUnderTest:
    fn = load_callable(target)
    if supports is None:
        supports = parse_supports(getattr(fn, "supports", None)) or frozenset()
    layout = layout or getattr(fn, "layout", None) or "bhnd"
    if layout not in LAYOUTS:
        raise ValueError(f"layout: {target} declares layout {layout!r}; expected one of {LAYOUTS}")

    def precision(dtype, dot_precision=None):
        # A user kernel states its arithmetic with a `precision(dtype)` attribute; otherwise the
        # common contract of fused attention kernels: operands in the input format (fp32 inputs:
        # IEEE fp32 products unless told otherwise), fp32 accumulation, libm exp on the CPU.
        own = getattr(fn, "precision", None)
        if callable(own):
            return own(dtype, dot_precision) if dot_precision else own(dtype)
        name = _dtype_name(dtype)
        dot = dot_precision or _half_dot(name) or ("fp64" if name == "float64" else "ieee")
        return _precision(input=name, dot=dot, accumulate="float64" if name == "float64" else "float32",
                          exp="libm")

    head_dims = getattr(fn, "head_dims", None)
    return KernelUnderTest(name=target, supports=supports, fn=fn, layout=layout,
                           precision_fn=precision,
                           head_dims=frozenset(head_dims) if head_dims else None)


# ---- ours ------------------------------------------------------------------------------------------

def ours_precision(dtype, dot_precision=None, *, head_dim=None, interpret=None, block_mask=None):
    """Our kernel's `kernels.attention.arithmetic(...)` as the `proofs.bounds.Precision` the bounds read."""
    from kernels.attention import arithmetic

    a = arithmetic(dtype, dot_precision, head_dim=head_dim, interpret=interpret, block_mask=block_mask)
    return _precision(input=a.input, dot=a.dot, accumulate="float32", output=a.output, exp=a.exp,
                      block_k=a.block_k, block_q=a.block_q)


def _ours() -> KernelUnderTest:
    def module():
        try:
            return importlib.import_module("kernels.attention")
        except ImportError as exc:  # another part of the project; say so instead of a traceback
            raise RuntimeError(f"kernels.attention is not importable: {exc}") from exc

    def fn(q, k, v, **kw):
        mod = module()
        params = inspect.signature(mod.attention).parameters
        if "return_lse" in params:
            kw["return_lse"] = True
        return mod.attention(q, k, v, **kw)

    def availability(device, dtype):
        try:
            module()
        except RuntimeError as exc:
            return str(exc)
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "the Triton kernel runs on the CPU only through TRITON_INTERPRET=1"
        if device == "cpu" and _dtype_name(dtype) == "bfloat16":
            return "the Triton interpreter does not support bfloat16 (verified on the GPU only)"
        return None

    def precision(dtype, dot_precision=None, head_dim=None):
        return ours_precision(dtype, dot_precision, head_dim=head_dim)

    return KernelUnderTest(name="ours", supports=CAPABILITIES, fn=fn, precision_fn=precision,
                           availability_fn=availability)


# ---- torch SDPA ------------------------------------------------------------------------------------

def _sdpa(target: str) -> KernelUnderTest:
    backend_name = SDPA_BACKENDS[target]

    def fn(q, k, v, *, causal=False, scale=None, mask=None):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        kw = {"scale": scale, "enable_gqa": q.shape[1] != k.shape[1]}
        if causal == "bottom_right":
            from torch.nn.attention.bias import causal_lower_right

            if mask is not None:  # the bias object does not combine with a mask: materialize it
                Nq, Nk = q.shape[2], k.shape[2]
                tril = torch.ones(Nq, Nk, dtype=torch.bool, device=q.device).tril(Nk - Nq)
                kw["attn_mask"] = mask & tril
            else:
                kw["attn_mask"] = causal_lower_right(q.shape[2], k.shape[2])
        elif causal:
            if mask is not None:
                Nq, Nk = q.shape[2], k.shape[2]
                kw["attn_mask"] = mask & torch.ones(Nq, Nk, dtype=torch.bool, device=q.device).tril()
            else:
                kw["is_causal"] = True
        elif mask is not None:
            kw["attn_mask"] = mask
        # IEEE fp32 products: the precision model below says "ieee" for fp32 inputs.
        old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            with sdpa_kernel(getattr(SDPBackend, backend_name)):
                return F.scaled_dot_product_attention(q, k, v, **kw), None
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old

    def availability(device, dtype):
        import torch

        name = _dtype_name(dtype)
        if device == "cpu" and backend_name in ("EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
            return f"{target} has no CPU implementation"
        if device.startswith("cuda"):
            if backend_name in ("FLASH_ATTENTION", "CUDNN_ATTENTION") and name not in ("float16", "bfloat16"):
                return f"{target} on CUDA takes float16/bfloat16 only"
            if backend_name == "CUDNN_ATTENTION" and not torch.backends.cudnn.is_available():
                return "cuDNN is not available"
        return None

    def precision(dtype, dot_precision=None):
        import torch

        name = _dtype_name(dtype)
        acc = "float64" if name == "float64" else "float32"
        if backend_name == "MATH":
            # aten::_scaled_dot_product_attention_math upcasts fp16/bf16 inputs to fp32 (exactly),
            # multiplies q and k each by sqrt(scale), then runs fp32 matmuls (TF32 off, see fn),
            # a full-row softmax (no K/V blocking) and rounds O to the input dtype at the end.
            dot = dot_precision or ("fp64" if name == "float64" else "ieee")
            return _precision(input=name, dot=dot, accumulate=acc, output=name,
                              exp="libm" if not torch.cuda.is_available() else "ex2.approx",
                              block_k=1 << 20, block_q=1 << 20)
        if backend_name == "FLASH_ATTENTION" and not torch.cuda.is_available():
            # The CPU flash kernel converts fp16/bf16 to fp32 (exact products), accumulates in fp32
            # over K/V splits of up to 512 keys with vectorized (<= 1 ulp) exp.
            dot = dot_precision or ("fp64" if name == "float64" else "ieee")
            return _precision(input=name, dot=dot, accumulate=acc, output=name, exp="libm",
                              block_k=512, block_q=512)
        # CUDA fused kernels: tensor-core products in the input format, fp32 accumulation,
        # ex2.approx; memory-efficient fp32 runs SIMT fp32 FMAs.
        dot = dot_precision or _half_dot(name) or "ieee"
        block = {"FLASH_ATTENTION": 128, "EFFICIENT_ATTENTION": 64, "CUDNN_ATTENTION": 128}[backend_name]
        return _precision(input=name, dot=dot, accumulate="float32", output=name, exp="ex2.approx",
                          block_k=block, block_q=block)

    return KernelUnderTest(name=target, supports=frozenset({"causal", "scale", "gqa", "backward", "mask"}),
                           fn=fn, precision_fn=precision, availability_fn=availability,
                           notes={"lse": "torch SDPA does not return the LSE through its public API"})


# ---- FlexAttention ---------------------------------------------------------------------------------

def _flex() -> KernelUnderTest:
    compiled = {}

    def fn(q, k, v, *, causal=False, scale=None, window=None, mask=None):
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        B, Hq, Nq = q.shape[:3]
        Nk = k.shape[2]
        off = (Nk - Nq) if causal == "bottom_right" else 0
        left, right = (window if window is not None else (None, None))
        woff = off if causal else 0
        dense = mask.expand(B, Hq, Nq, Nk) if mask is not None else None

        def mask_mod(b, h, i, j):
            ok = j >= 0
            if causal:
                ok = ok & (j <= i + off)
            if left is not None:
                ok = ok & (j >= i + woff - left)
            if right is not None:
                ok = ok & (j <= i + woff + right)
            if dense is not None:
                ok = ok & dense[b, h, i, j]
            return ok

        block_mask = None
        if causal or window is not None or mask is not None:
            block_mask = create_block_mask(mask_mod, B, Hq, Nq, Nk, device=q.device)
        run = flex_attention
        if q.is_cuda:
            run = compiled.setdefault("fn", torch.compile(flex_attention))
        o, lse = run(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=Hq != k.shape[1],
                     return_lse=True)
        return o, lse

    def precision(dtype, dot_precision=None):
        import torch

        name = _dtype_name(dtype)
        if torch.cuda.is_available():
            dot = dot_precision or _half_dot(name) or "tf32"
            return _precision(input=name, dot=dot, accumulate="float32", output=name, exp="ex2.approx",
                              block_k=128, block_q=128)
        # Eager CPU FlexAttention materializes the scores in the input dtype's compute type.
        acc = "float64" if name == "float64" else "float32"
        dot = dot_precision or ("fp64" if name == "float64" else _half_dot(name) or "ieee")
        return _precision(input=name, dot=dot, accumulate=acc, output=name, exp="libm",
                          block_k=1 << 20, block_q=1 << 20)

    import torch

    # FlexAttention has no backward on the CPU ("does not support backward on CPU"): declared on CUDA only.
    supports = CAPABILITIES if torch.cuda.is_available() else CAPABILITIES - {"backward"}
    return KernelUnderTest(name="flex", supports=supports, fn=fn, precision_fn=precision,
                           notes={} if torch.cuda.is_available() else {"backward": "no CPU backward"})

