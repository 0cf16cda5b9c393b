"""Third-party attention kernels behind one interface: the kernel under test.

`resolve(target)` turns a target string into a `KernelUnderTest`:

- ``"ours"``: `flashcheck.kernels.attention` (the Triton kernel; on the CPU it needs ``TRITON_INTERPRET=1``);
  ``"ours-accurate"``: the same with ``precision="accurate"`` (the split-P forward);
- ``"torch-sdpa-math"``, ``"torch-sdpa-flash"``, ``"torch-sdpa-efficient"``, ``"torch-sdpa-cudnn"``:
  `torch.nn.functional.scaled_dot_product_attention` pinned to one backend with
  `torch.nn.attention.sdpa_kernel`;
- ``"flex"``: `torch.nn.attention.flex_attention` (compiled on the GPU only);
- ``"package.module:function"`` or ``"path/to/file.py:function"``: a user callable, called as
  ``fn(q, k, v, **kw)`` with only the declared capabilities in ``kw``; it returns O, or (O, LSE) when
  ``"lse"`` is declared.

Causal: a kernel declaring ``"causal"`` receives ``causal=True`` (a bool) and declares which diagonal
that means when Nq != Nk (`Domain.causal_alignment`): ``"top_left"`` (torch SDPA's convention, the
default) or ``"bottom_right"`` (flash-attn's). A kernel may also declare the domain it accepts (head
dims, a sequence-length multiple, min/max N, dtypes, Nq = Nk only, GQA ratios: `Domain`), as function
attributes or options; inputs are generated inside it. An exception from the kernel itself is a
`Refusal` of that input, not a wrong answer.

Every kernel takes and returns (B, H, N, d) tensors; a ``layout="bnhd"`` kernel gets (B, N, H, d)
tensors and its outputs are transposed back. Masks are always (B, Hq, Nq, Nk)-broadcastable booleans,
True = attend. `precision(dtype)` states the arithmetic the kernel performs, the input of the derived
error bound (`flashcheck.proofs.bounds.Precision`).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable

# "deterministic": the backward repeats bit for bit (a declared capability, so it can fail).
CAPABILITIES = frozenset({"causal", "scale", "gqa", "lse", "backward", "mask", "window", "deterministic"})
ALIGNMENTS = ("top_left", "bottom_right")
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64")
LAYOUTS = ("bhnd", "bnhd")
SDPA_BACKENDS = {
    "torch-sdpa-math": "MATH",
    "torch-sdpa-flash": "FLASH_ATTENTION",
    "torch-sdpa-efficient": "EFFICIENT_ATTENTION",
    "torch-sdpa-cudnn": "CUDNN_ATTENTION",
}
BUILTINS = ("ours", "ours-accurate", *SDPA_BACKENDS, "flex")


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _precision(**fields):
    """A Precision whose key-tile order is "any" unless the caller knows it: third-party kernels
    (flash-attn visits key blocks from the last one) and user kernels do not state their order."""
    from flashcheck.proofs.bounds import Precision

    fields.setdefault("tile_order", "any")
    return Precision(**fields)


def _half_dot(dtype_name: str) -> str | None:
    return {"float16": "fp16", "bfloat16": "bf16"}.get(dtype_name)


class Refusal(Exception):
    """The kernel raised on an input: it refused it (recorded and reported, never counted as agreement)."""

    def __init__(self, error: BaseException, why: str | None = None):
        self.error = error
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        # the first line, and the last where the first only introduces it ("... raised:")
        text = " ".join(lines[:1] + (lines[-1:] if len(lines) > 1 and lines[0].endswith(":") else []))
        super().__init__(f"{type(error).__name__}: {text}"[:400] + (f" ({why})" if why else ""))


@dataclass(frozen=True)
class Domain:
    """The inputs a kernel declares it accepts; inputs are generated inside it.

    head_dims: accepted head dimensions (None: any); seq_multiple: Nq and Nk multiples of it;
    min_n/max_n: bounds on Nq and Nk; dtypes: accepted input dtypes (None: any); square_only: Nq = Nk;
    gqa_ratios: accepted Hq / Hkv (None: any, when "gqa" is declared); causal_alignment: the
    diagonal `causal=True` means when Nq != Nk.
    """
    head_dims: frozenset | None = None
    seq_multiple: int = 1
    min_n: int = 1
    max_n: int | None = None
    dtypes: tuple | None = None
    square_only: bool = False
    gqa_ratios: frozenset | None = None
    causal_alignment: str = "top_left"

    def __post_init__(self):
        if self.causal_alignment not in ALIGNMENTS:
            raise ValueError(f"causal_alignment: expected one of {ALIGNMENTS} (or top-left/bottom-right), "
                             f"got {self.causal_alignment!r}")
        if self.seq_multiple < 1 or self.min_n < 1 or (self.max_n is not None and self.max_n < self.min_n):
            raise ValueError(f"domain: need seq_multiple >= 1, 1 <= min_n <= max_n; got seq_multiple="
                             f"{self.seq_multiple}, min_n={self.min_n}, max_n={self.max_n}")
        if self.dtypes is not None and set(self.dtypes) - set(DTYPE_NAMES):
            raise ValueError(f"dtypes: unknown {sorted(set(self.dtypes) - set(DTYPE_NAMES))}; expected a subset "
                             f"of {DTYPE_NAMES}")

    def describe(self) -> str:
        parts = []
        if self.head_dims is not None:
            parts.append("head dims " + ",".join(map(str, sorted(self.head_dims))))
        if self.seq_multiple > 1:
            parts.append(f"N a multiple of {self.seq_multiple}")
        if self.min_n > 1:
            parts.append(f"N >= {self.min_n}")
        if self.max_n is not None:
            parts.append(f"N <= {self.max_n}")
        if self.dtypes is not None:
            parts.append("dtypes " + ",".join(self.dtypes))
        if self.square_only:
            parts.append("Nq = Nk only")
        if self.gqa_ratios is not None:
            parts.append("GQA ratios " + ",".join(map(str, sorted(self.gqa_ratios))))
        parts.append(f"causal {self.causal_alignment.replace('_', '-')}")
        return "; ".join(parts)


def _ints(value, name) -> frozenset | None:
    if value is None or value == "":
        return None
    items = value.replace(" ", "").split(",") if isinstance(value, str) else list(value)
    try:
        return frozenset(int(x) for x in items if x != "")
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected comma-separated integers, got {value!r}") from None


def domain_from(source=None, **overrides) -> Domain:
    """A Domain from a function's attributes (`head_dims`, `seq_multiple`, `min_n`, `max_n`, `dtypes`,
    `square_only`, `gqa_ratios`, `causal_alignment`), then `overrides` that are not None (options)."""
    fields = {}
    for name in ("head_dims", "seq_multiple", "min_n", "max_n", "dtypes", "square_only", "gqa_ratios",
                 "causal_alignment"):
        value = overrides.get(name)
        if value is None and source is not None:
            value = getattr(source, name, None)
        if value is None:
            continue
        if name in ("head_dims", "gqa_ratios"):
            value = _ints(value, name)
        elif name in ("seq_multiple", "min_n", "max_n"):
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"{name}: expected an integer, got {value!r}") from None
        elif name == "dtypes":
            value = tuple(_dtype_name(x) for x in (value.replace(" ", "").split(",") if isinstance(value, str)
                                                     else value) if x)
        elif name == "square_only":
            value = bool(value)
        elif name == "causal_alignment":
            value = str(value).replace("-", "_")
        fields[name] = value
    return Domain(**fields)


@dataclass(eq=False)
class KernelUnderTest:
    """One attention kernel, callable in the project's conventions.

    `fn(q, k, v, *, causal, scale, window, mask)` receives (B, H, N, d) tensors already in the
    kernel's layout and only the capabilities it declares (`causal` a bool), and returns
    (O, LSE or None) in that layout.
    """

    name: str
    supports: frozenset
    fn: Callable
    layout: str = "bhnd"
    precision_fn: Callable | None = None
    availability_fn: Callable | None = None
    domain: Domain = field(default_factory=Domain)
    # compile_key(signature): the compiled code a call needs, a frozenset of binaries (ours: Triton's) or
    # one hashable (Flex: its padded shape); flashcheck.warmup compiles each once. None: every distinct
    # call signature may compile its own
    compile_key: Callable | None = None

    def __repr__(self):
        return f"KernelUnderTest({self.name!r}, supports={','.join(sorted(self.supports)) or 'nothing'})"

    def _repr_pretty_(self, printer, cycle):  # hypothesis's falsifying-example printer
        printer.text(repr(self))

    def available(self, device: str, dtype) -> str | None:
        """None when the kernel can run on `device` in `dtype`, else the reason it cannot."""
        import torch

        if device.startswith("cuda") and not torch.cuda.is_available():
            return "CUDA is not available on this machine"
        name = _dtype_name(dtype)
        if self.domain.dtypes is not None and name not in self.domain.dtypes:
            return f"it declares dtypes {','.join(self.domain.dtypes)} only"
        if self.availability_fn is not None:
            return self.availability_fn(device, dtype)
        return None

    def __call__(self, q, k, v, *, causal=False, scale=None, window=None, mask=None):
        """(O, LSE or None) in (B, H, N, d); an exception from the kernel itself is raised as a `Refusal`.
        A capability the kernel does not declare is a ValueError (the suite's mistake, never a refusal)."""
        if causal not in (False, True):
            raise ValueError(f"causal: the kernel under test takes a bool (its alignment is declared), "
                             f"got {causal!r}")
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
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            try:
                out = self.fn(q, k, v, **kw)
            except Exception as exc:  # noqa: BLE001 - whatever the kernel raises is its refusal
                # torch SDPA says why each backend declined only in warnings: keep the first reason
                why = next((str(w.message).splitlines()[0] for w in said if "kernel" in str(w.message).lower()
                            or "support" in str(w.message).lower()), None)
                raise Refusal(exc, why) from exc
        for w in said:  # warnings of a call that ran: passed on as they came
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
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
        """The arithmetic the kernel performs in `dtype` (a `flashcheck.proofs.bounds.Precision`); its tiling may
        depend on the head dimension."""
        if self.precision_fn is None:
            raise ValueError(f"{self.name}: no precision model is known")
        return self.precision_fn(dtype, dot_precision, head_dim=head_dim)


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


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve(target: str, *, supports: Iterable[str] | str | None = None, layout: str | None = "bhnd",
            device: str | None = None, **domain) -> KernelUnderTest:
    """The kernel named by `target` (see the module docstring) as it runs on `device` (default: cuda
    when available, else cpu); `supports` overrides what it declares, and the `Domain` fields in
    `domain` (None: not given) override its declared domain.

    A built-in's capabilities and precision model follow the device it runs on, not the machine: torch
    SDPA's CPU flash backend on a GPU machine is still the CPU kernel (deterministic, libm exp).

    A user function may declare its own defaults as attributes: `fn.supports` ("causal,lse,..."),
    `fn.layout` (used when `layout` is None), `fn.precision(dtype)` and the `Domain` fields
    (`fn.head_dims`, `fn.causal_alignment`, ...).
    """
    if not isinstance(target, str) or not target:
        raise ValueError(f"target: expected a built-in name {BUILTINS}, 'package.module:function' or "
                         f"'path/to/file.py:function', got {target!r}")
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    declared = parse_supports(supports)
    if target in BUILTINS and layout not in (None, "bhnd"):
        raise ValueError(f"layout: the built-in kernel {target} takes (B, H, N, d) tensors (bhnd), got {layout!r}")
    device = device or default_device()
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"device: expected 'cpu' or 'cuda', got {device!r}")
    on_cuda = device.startswith("cuda")
    if target == "ours":
        kut = _ours(on_cuda)
    elif target == "ours-accurate":
        kut = _ours_accurate(on_cuda)
    elif target in SDPA_BACKENDS:
        kut = _sdpa(target, on_cuda)
    elif target == "flex":
        kut = _flex(on_cuda)
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
    given = {k: v for k, v in domain.items() if v is not None}
    if given:
        if target in BUILTINS and "causal_alignment" in given and \
                given["causal_alignment"].replace("-", "_") != kut.domain.causal_alignment:
            raise ValueError(f"causal alignment: {target} is {kut.domain.causal_alignment.replace('_', '-')} "
                             f"(built in), got {given['causal_alignment']!r}")
        kut.domain = domain_from(kut.domain, **given)
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

    def precision(dtype, dot_precision=None, *, head_dim=None):
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

    return KernelUnderTest(name=target, supports=supports, fn=fn, layout=layout, precision_fn=precision,
                           domain=domain_from(fn))


# ---- ours ------------------------------------------------------------------------------------------

def ours_precision(dtype, dot_precision=None, *, head_dim=None, interpret=None, block_mask=None,
                   precision="default", delta_from="fp32", tiles=None):
    """Our kernel's `flashcheck.kernels.attention.arithmetic(...)` (for these `attention` options) as the
    `flashcheck.proofs.bounds.Precision` the bounds read: tile by tile into the accumulator ("recursive"), the
    measured H100 hardware on the GPU, the CPU's IEEE arithmetic in the interpreter (exp "libm")."""
    from flashcheck.kernels.attention import arithmetic
    from flashcheck.proofs.bounds import BandForward, FusedDq
    from flashcheck.proofs.hardware import h100, interpreter

    a = arithmetic(dtype, dot_precision, head_dim=head_dim, interpret=interpret, block_mask=block_mask,
                   precision=precision, delta_from=delta_from, tiles=tiles)
    hw = interpreter() if a.exp == "libm" else h100()
    # the rowsum's addition tree and the exponent arguments' forms, read off this Triton's PTX for these tiles;
    # never in the interpreter, nor for block-sparse masks (their own tiles) or tiles the record lacks
    rec = None if a.exp == "libm" or block_mask is not None else _compiled_record(dtype, a.dot, head_dim, precision,
                                                                                  tiles)
    # fp32 "ieee" logits as known FMA chains: on the GPU only, where measured (proofs/hardware.py ieee_dot,
    # bench/probe_fma_dot.py); never in the interpreter. The chain is Triton's llvm.fmuladd contracted into
    # fma.rn.f32, which needs FP fusion on: only where this Triton's record shows the contraction (the exponent
    # arguments fused, exp_argument "fma"; Triton 3.10 turns fusion off by default) and nothing forces it off
    fusion = rec is not None and rec["exp_argument"] == "fma" and _fp_fusion_default()
    fma_chain = (a.exp != "libm" and hw.ieee_dot == "fma_chain" and (a.input, a.dot) == ("float32", "ieee")
                 and _block_d(head_dim) in hw.ieee_dot_k and fusion)

    def forward_tile(block_k, block_q_fwd, outer=(None, None, None), **call):
        """The BandForward of the forward tile kernel_config gives calls of this kind (`call`: band= or n_keys=),
        None where it gives none of its own; its rowsum depth from that tile's record; `outer`: the backward's outer
        blocks (dQ rows, dK/dV keys per program) and dK/dV query tile these calls run where they differ."""
        if block_k is None:
            return None
        depth = None if rec is None else (_compiled_record(dtype, a.dot, head_dim, precision, tiles, **call)
                                          or {}).get("rowsum_depth")
        return BandForward(block_k=block_k, block_q_fwd=block_q_fwd, rowsum_depth=depth, block_q_dq=outer[0],
                           block_k_dkdv=outer[1], block_q=outer[2])
    return _precision(input=a.input, dot=a.dot, accumulate="float32", output=a.output, exp=a.exp,
                      block_k=a.block_k, block_q=a.block_q, block_k_dq=a.block_k_dq,  # dQ's own key tiles
                      # the backward kernels' outer blocks and how their partial tiles are chosen: the order of the
                      # chains on heads with masked entries (Precision.block_q_dq, block_k_dkdv, tile_lists)
                      block_q_dq=a.block_q_dq, block_k_dkdv=a.block_k_dkdv, tile_lists=a.tile_lists,
                      # the forward's query blocks (BLOCK_M): its chains on masked heads in each block's order
                      block_q_fwd=a.block_q_fwd,
                      # long calls' own forward tile (kernel_config(n_keys=LONG_KEYS)), its rowsum tree from its record,
                      # and their backward's outer blocks and dK/dV query tile (the Gluon backward's at d = 64)
                      long_forward=forward_tile(a.block_k_long, a.block_q_fwd_long,
                                                (a.block_q_dq_long, a.block_k_dkdv_long, a.block_q_long),
                                                n_keys=a.long_keys, n_queries=a.long_keys),
                      long_keys=a.long_keys,
                      # short unbanded, unmasked calls' own forward tile (kernel_config(n_keys=SHORT_KEYS, n_queries=
                      # given)), and their backward's outer blocks and dK/dV query tile (the Gluon backward's at d = 64)
                      short_forward=forward_tile(a.block_k_short, a.block_q_fwd_short,
                                                 (a.block_q_dq_short, a.block_k_dkdv_short, a.block_q_short),
                                                 n_keys=a.short_keys, n_queries=a.short_keys),
                      short_keys=a.short_keys,
                      # banded calls' own forward tile (kernel_config(band=True); from band_keys keys on, unmasked:
                      # kernel_config(band=True, n_keys=, n_queries=)), its rowsum tree from its own record
                      band_forward=forward_tile(a.block_k_band, a.block_q_fwd_band, band=True, n_keys=a.band_keys,
                                                n_queries=a.band_keys),
                      band_keys=a.band_keys,
                      # unbanded calls from this many queries and keys on (banded ones without a left edge from
                      # fused_band_keys keys): dQ summed in the dK/dV kernel (128-key partials added in a fixed order,
                      # rotated up to fused_rotate_keys keys when unbanded: kernels/gluon_bwd_fused.py), for dv = d
                      # only (calls with another dv run the dQ kernel: kernels/attention.py _fused_dkdv)
                      fused_dq=None if a.fused_dq_keys is None else FusedDq(
                          queries=a.fused_dq_queries, keys=a.fused_dq_keys, block_k=a.block_k_dq_fused,
                          value_dim=head_dim or 64, rotate_keys=a.fused_rotate_keys or 0,
                          max_group=a.fused_dq_max_group,
                          keys_at_most_queries=a.fused_dq_keys_at_most_queries,
                          band_keys=a.fused_band_keys, band_max_group=a.fused_band_max_group),
                      accumulation="recursive", p_split=a.p_split, delta_from=a.delta_from, l_accumulate=a.l_accumulate,
                      tile_order="partial_first",  # kernels/tiles.py visits a ragged last key tile first
                      hardware=hw, ieee_fma_chain=fma_chain,
                      rowsum_depth=None if rec is None else rec["rowsum_depth"],
                      # the compiled forms read the known fp32 dot: with the FMA chains only
                      exp_argument="fma" if fma_chain else "unknown",
                      # and at known arguments ex2's values, where the H100's table is measured (proofs/ex2_model.py)
                      ex2_known=fma_chain and _ex2_measured(),
                      # and lg2's (the stored LSE as an interval of known values), with l in fp64 and a known tree depth
                      lg2_known=(fma_chain and _ex2_measured() and _lg2_measured() and a.l_accumulate == "float64"
                                 and rec is not None and rec["rowsum_depth"] is not None),
                      # and the backward's recomputed P~, where this Triton's record shows both backward kernels'
                      # arguments rounded once for these tiles (Precision.bwd_p_known)
                      bwd_p_known=fma_chain and _ex2_measured() and _bwd_exp_fma(rec, tiles),
                      # the Delta dot's tree, read off this Triton's PTX of the preprocess kernel for this delta_from;
                      # its pairs are contracted fmas: compiled with FP fusion off, each pair rounds both products
                      **(_delta_claim(rec, a.delta_from) if _fp_fusion_default() else {}))


def _fp_fusion_default() -> bool:
    """Whether Triton compiles with FP fusion as the compiled-code record was made (on: TRITON_DEFAULT_FP_FUSION unset
    or not 0, the Triton 3.9 default, and TRITON_FORCE_DISABLE_FP_FUSION unset or 0)."""
    return (os.environ.get("TRITON_FORCE_DISABLE_FP_FUSION", "0") in ("", "0")
            and os.environ.get("TRITON_DEFAULT_FP_FUSION", "1") != "0")


def _delta_claim(rec: dict | None, delta_from: str) -> dict:
    """Precision.delta_depth and delta_trees from the compiled-code record's config (`_compiled_record`; "delta",
    bench/compile_forward.py delta_tree: the preprocess kernel for delta_from's HAS_RES). Nothing without a record,
    for a record written before the Delta dot was read (no key: Triton 3.6.0's until the GPU machine adds it,
    --record-delta), or where the PTX did not show a tree over every column (depth None)."""
    entry = (rec or {}).get("delta", {}).get(delta_from)
    if entry is None or entry["depth"] is None:
        return {}
    orders = entry["orders"]
    return {"delta_depth": entry["depth"],
            "delta_trees": None if orders is None or len(orders[0]).bit_length() != entry["depth"]
            else tuple(tuple(o) for o in orders)}


def _ex2_measured() -> bool:
    from flashcheck.proofs import ex2_model

    return ex2_model.measured()


def _lg2_measured() -> bool:
    from flashcheck.proofs import lg2_model

    return lg2_model.measured()


def _compiled_record(dtype, dot: str, head_dim, precision: str, tiles, band: bool = False,
                     n_keys: int | None = None, n_queries: int | None = None) -> dict | None:
    """Our forward's entry in proofs/measurements/forward_compiled_triton<version>.json (bench/compile_forward.py
    --record, from the PTX this Triton version compiles for these tiles, specialized as the JIT does, over the plain,
    causal and dense-mask variants, aligned and not: the deepest term of any tile rowsum, rowsum_depth, and the
    exponent arguments' forms, exp_argument), None where the record or the config is missing. `band`: the forward's
    tile for banded calls (kernel_config(band=True)); `n_keys`, `n_queries`: for calls with that many keys and queries
    (kernel_config(n_keys=, n_queries=): the long tile; the short one, unmasked)."""
    import triton

    from flashcheck.kernels.attention import kernel_config

    configs = _compiled_configs(triton.__version__)
    if head_dim is None or configs is None:
        return None
    if isinstance(dtype, str):  # the names arithmetic() accepts too
        import torch

        dtype = getattr(torch, dtype)
    t = (tiles or kernel_config(int(head_dim), dtype, interpret=False, precision=precision, band=band,
                                n_keys=n_keys, n_queries=n_queries)).fwd
    if t.warp_specialize or t.pipeline_qk:
        return None  # other code: not in the record
    name = str(dtype).replace("torch.", "")
    op_dot = dot if name == "float32" else "tf32"  # the launcher's spelling for 16-bit operands

    def entry(engine: str) -> dict | None:
        for c in configs:
            if ((c["dtype"], c["dot"], c["block_d"], c["block_m"], c["block_n"], c["num_warps"], c["p_split"],
                 c.get("engine", "triton"))
                    == (name, op_dot, _block_d(head_dim), t.block_m, t.block_n, t.num_warps, precision == "accurate",
                        engine)):
                return c
        return None
    if not t.gluon:
        return entry("triton")
    # gluon tiles: gluon_fwd runs the calls in its domain, triton_fwd the others with the same tiles; a claim holds
    # for both engines' compiled code or is not made
    g, tr = entry("gluon"), entry("triton")
    if g is None or tr is None:
        return None
    depth = None if None in (g["rowsum_depth"], tr["rowsum_depth"]) else max(g["rowsum_depth"], tr["rowsum_depth"])
    return {**tr, "rowsum_depth": depth, "exp_argument": "unknown", "engine": "gluon+triton"}


def _bwd_exp_fma(rec: dict | None, tiles=None) -> bool:
    """Whether the compiled-code record's config (`_compiled_record`) shows the backward kernels' exponent
    arguments rounded once: bwd_exp_argument "fma_min" (bench/compile_forward.py backward_exp_argument: in both the
    dK/dV and the dQ kernel, plain calls, P~ = ex2(min(fl32(c2 qk - fl32(LSE log2 e)), 0)) with qk tl.dot's FMA
    chain). False without a record, for a record written before the backward was read (no key: Triton 3.6.0's
    until the GPU machine regenerates it), and where `tiles` (a KernelConfig) asks for dK/dV or dQ tiles other than
    the recorded ones (kernel_config's)."""
    if rec is None or rec.get("bwd_exp_argument") != "fma_min":
        return False
    if tiles is not None:
        recorded = rec.get("bwd_tiles", {})
        for name, t in (("attn_bwd_dkdv_kernel", tiles.dkdv), ("attn_bwd_dq_kernel", tiles.dq)):
            r = recorded.get(name)
            if r is None or ((r["block_m"], r["block_n"], r["num_warps"], r["num_stages"])
                             != (t.block_m, t.block_n, t.num_warps, t.num_stages)):
                return False
    return True


@functools.lru_cache(maxsize=None)
def _compiled_configs(triton_version: str) -> tuple | None:
    """The configs of proofs/measurements/forward_compiled_triton<version>.json, read once per process (every
    judged call asks for its precision), None without a record."""
    import json

    from flashcheck.proofs.hardware import MEASUREMENTS

    path = MEASUREMENTS / f"forward_compiled_triton{triton_version}.json"
    if not path.exists():
        return None
    with open(path) as f:
        return tuple(json.load(f)["configs"])


def _block_d(head_dim) -> int | None:
    """The kernel's padded head dim (BLOCK_D = max(16, next power of 2)); None when not given."""
    if head_dim is None:
        return None
    return max(16, 1 << (int(head_dim) - 1).bit_length())


def ours_compile_key(precision: str = "default"):
    """`KernelUnderTest.compile_key` of our kernel on CUDA: the Triton binaries a call with this
    signature compiles (forward, and with a gradient the backward's three), from the launch
    configuration the launcher itself uses (`flashcheck.kernels.attention.launches`: the Gluon kernels' records
    where this device runs them) and Triton's specialization of each launch (`flashcheck.warmup.triton_binary`)."""

    def compile_key(sig) -> frozenset:
        from flashcheck.warmup import triton_binary
        from flashcheck.kernels.attention import Layout, gluon_device, launches

        strides = sig.strides or (None, None, None)
        q, k, v = (Layout(sig.dtype, shape, st) if st is not None else Layout.dense(sig.dtype, shape)
                   for shape, st in zip((sig.q, sig.k, sig.v), strides))
        # causal=True means the declared bottom-right alignment (`fn` below)
        return frozenset(triton_binary(launch) for launch in launches(
            q, k, v, causal="bottom_right" if sig.causal else False, window=sig.window, mask_shape=sig.mask,
            grad=sig.grad, precision=precision, interpret=False, gluon=gluon_device()))

    return compile_key


def _ours(on_cuda: bool = True) -> KernelUnderTest:
    from flashcheck.kernels.attention import attention

    def fn(q, k, v, *, causal=False, **kw):
        # causal=True means the declared alignment, bottom-right (flash-attn's, flashcheck.kernels.attention's "bottom_right")
        return attention(q, k, v, causal="bottom_right" if causal else False, return_lse=True, **kw)

    def availability(device, dtype):
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "the Triton kernel runs on the CPU only through TRITON_INTERPRET=1"
        if device == "cpu" and _dtype_name(dtype) == "bfloat16":
            return "the Triton interpreter does not support bfloat16 (verified on the GPU only)"
        return None

    def precision(dtype, dot_precision=None, *, head_dim=None):
        return ours_precision(dtype, dot_precision, head_dim=head_dim)

    return KernelUnderTest(name="ours", supports=CAPABILITIES, fn=fn, precision_fn=precision,
                           availability_fn=availability,
                           domain=Domain(dtypes=("float32", "float16", "bfloat16"), causal_alignment="bottom_right"),
                           compile_key=ours_compile_key() if on_cuda else None)  # the interpreter compiles nothing


# ---- ours, accurate forward (kernel owner's block) -------------------------------------------------

def _ours_accurate(on_cuda: bool = True) -> KernelUnderTest:
    """Our kernel with precision="accurate" (P·V as P_hi·V + P_lo·V, proofs/accurate_modes.md) and
    its default accurate backward: the same kernel under another name, its own precision model."""
    from flashcheck.kernels.attention import attention

    kut = _ours(on_cuda)

    def fn(q, k, v, *, causal=False, **kw):
        return attention(q, k, v, causal="bottom_right" if causal else False, return_lse=True,
                         precision="accurate", **kw)

    def precision(dtype, dot_precision=None, *, head_dim=None):
        return ours_precision(dtype, dot_precision, head_dim=head_dim, precision="accurate")

    kut.name, kut.fn, kut.precision_fn = "ours-accurate", fn, precision
    if on_cuda:
        kut.compile_key = ours_compile_key("accurate")
    return kut


# ---- torch SDPA ------------------------------------------------------------------------------------

def _sdpa(target: str, on_cuda: bool) -> KernelUnderTest:
    backend_name = SDPA_BACKENDS[target]

    def fn(q, k, v, *, causal=False, scale=None, mask=None):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        kw = {"scale": scale, "enable_gqa": q.shape[1] != k.shape[1]}
        if causal and mask is not None:  # is_causal does not combine with attn_mask: materialize top-left
            Nq, Nk = q.shape[2], k.shape[2]
            kw["attn_mask"] = mask & torch.ones(Nq, Nk, dtype=torch.bool, device=q.device).tril()
        elif causal:
            kw["is_causal"] = True  # top-left, the alignment declared below
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

    def precision(dtype, dot_precision=None, *, head_dim=None):
        import torch

        name = _dtype_name(dtype)
        acc = "float64" if name == "float64" else "float32"
        if backend_name == "MATH":
            # aten::_scaled_dot_product_attention_math upcasts fp16/bf16 inputs to fp32 (exactly),
            # multiplies q and k each by sqrt(scale), then runs fp32 matmuls (TF32 off, see fn),
            # a full-row softmax (no K/V blocking) and rounds O to the input dtype at the end.
            dot = dot_precision or ("fp64" if name == "float64" else "ieee")
            return _precision(input=name, dot=dot, accumulate=acc, output=name,
                              exp="ex2.approx" if on_cuda else "libm",
                              block_k=1 << 20, block_q=1 << 20)
        if backend_name == "FLASH_ATTENTION" and not on_cuda:
            # The CPU flash kernel converts fp16/bf16 to fp32 (exact products), accumulates in fp32
            # over K/V splits of up to 512 keys with vectorized (<= 1 ulp) exp.
            dot = dot_precision or ("fp64" if name == "float64" else "ieee")
            return _precision(input=name, dot=dot, accumulate=acc, output=name, exp="libm",
                              block_k=512, block_q=512)
        # CUDA fused kernels: tensor-core products in the input format, fp32 accumulation,
        # ex2.approx; memory-efficient fp32 runs SIMT fp32 FMAs. With GQA they compute dK, dV per query
        # head, store them in the input dtype and sum the group afterwards (flash-attn's dk_expanded +
        # sum; repeated K/V under autograd): gqa_reduction="rounded_heads".
        dot = dot_precision or _half_dot(name) or "ieee"
        block = {"FLASH_ATTENTION": 128, "EFFICIENT_ATTENTION": 64, "CUDNN_ATTENTION": 128}[backend_name]
        return _precision(input=name, dot=dot, accumulate="float32", output=name, exp="ex2.approx",
                          block_k=block, block_q=block, gqa_reduction="rounded_heads")

    supports = {"causal", "scale", "gqa", "backward", "mask"}
    # the math backend's backward repeats bit for bit (fixed-order matmuls), and so does the CPU flash
    # backend's; the CUDA fused kernels' backwards are not declared deterministic (atomic dQ adds)
    if backend_name == "MATH" or (backend_name == "FLASH_ATTENTION" and not on_cuda):
        supports.add("deterministic")
    return KernelUnderTest(name=target, supports=frozenset(supports), domain=Domain(causal_alignment="top_left"),
                           fn=fn, precision_fn=precision, availability_fn=availability)  # no LSE: SDPA's public API does not return it


# ---- FlexAttention ---------------------------------------------------------------------------------

FLEX_PAD_N = 128  # Flex's block size: sequence lengths are padded to a multiple of it on the GPU
FLEX_MIN_N = 256  # ... and to at least this, so every N of the suite's shapes (<= 130) is one compiled shape
FLEX_MIN_D = 64  # head dims padded to a power of two, at least this: 64, 128 or 256
FLEX_MIN_B, FLEX_MIN_HKV = 2, 4  # batch and kv heads padded up to these (query heads: Hkv x group)
FLEX_RECOMPILES = 64  # compiled graphs per process: GQA groups x head dims x (forward, forward+backward)


def _pad_to(n: int, m: int) -> int:
    return -(-n // m) * m


def flex_padded_shape(B, Hq, Hkv, Nq, Nk, d, dv) -> tuple:
    """The shape (B, Hq, Hkv, Nq, Nk, d) FlexAttention is compiled for: a bounded set (one per GQA group
    and head-dim class for the suite's shapes), so torch.compile does not recompile per example.
    Padding is exact: zero head-dim columns leave q.k unchanged, padded keys are masked out, padded
    query rows, heads and batches are sliced off; the GQA map h -> h // group is kept (the padded
    query heads read only padded kv heads)."""
    group = Hq // Hkv
    Hkv_p = max(Hkv, FLEX_MIN_HKV)
    D = max(FLEX_MIN_D, 1 << (max(d, dv) - 1).bit_length())
    return (max(B, FLEX_MIN_B), Hkv_p * group, Hkv_p, max(FLEX_MIN_N, _pad_to(Nq, FLEX_PAD_N)),
            max(FLEX_MIN_N, _pad_to(Nk, FLEX_PAD_N)), D)


def _flex(on_cuda: bool, compile: bool | None = None) -> KernelUnderTest:
    """FlexAttention; `compile` (default: on CUDA) runs it through torch.compile on padded shapes."""
    compile = on_cuda if compile is None else compile
    compiled = {}

    def compiled_flex():
        """flex_attention compiled once per process for static padded shapes (`flex_padded_shape`). The
        softmax scale is a constexpr of Flex's Triton template (SM_SCALE), so it is passed as 1.0 and
        applied by a score_mod reading a captured fp32 scalar: the same one fp32 product per logit,
        without a compile per scale. Past the recompile limit dynamo would silently run unfused flex:
        made an error instead. Inductor compiles in this process (compile_threads=1): under
        pytest-xdist each worker would otherwise start a pool of one compile subprocess per core."""
        import torch
        import torch._inductor.config as inductor_config
        from torch.nn.attention.flex_attention import flex_attention

        if "fn" not in compiled:
            for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                         "accumulated_recompile_limit"):
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), FLEX_RECOMPILES))
            if hasattr(torch._dynamo.config, "fail_on_recompile_limit_hit"):
                torch._dynamo.config.fail_on_recompile_limit_hit = True
            inductor_config.compile_threads = 1
            compiled["fn"] = torch.compile(flex_attention, dynamic=False, fullgraph=True)
        return compiled["fn"]

    def fn(q, k, v, *, causal=False, scale=None, window=None, mask=None):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        B, Hq, Nq, d = q.shape
        Hkv, Nk, dv = k.shape[1], k.shape[2], v.shape[-1]
        scale = 1.0 / (d ** 0.5) if scale is None else scale  # before padding d
        if on_cuda:  # (the padded path runs eagerly on CPU tensors too: tests/test_domain.py checks it)
            PB, PHq, PHkv, Pq, Pk, Pd = flex_padded_shape(B, Hq, Hkv, Nq, Nk, d, dv)
            q = F.pad(q, (0, Pd - d, 0, Pq - Nq, 0, PHq - Hq, 0, PB - B))
            k = F.pad(k, (0, Pd - d, 0, Pk - Nk, 0, PHkv - Hkv, 0, PB - B))
            v = F.pad(v, (0, Pd - dv, 0, Pk - Nk, 0, PHkv - Hkv, 0, PB - B))
        else:
            PB, PHq, Pq, Pk = B, Hq, Nq, Nk
        # One mask_mod for every case, reading one captured dense visibility tensor (causal, window, mask
        # and the padded keys folded in), so the compiled kernel depends on shapes only, not on N,
        # windows or masks (a Python constant in mask_mod would be guarded on and recompile).
        i = torch.arange(Pq, device=q.device)[:, None]
        j = torch.arange(Pk, device=q.device)[None, :]
        vis = j < Nk
        if causal:
            vis = vis & (j <= i)  # top-left, as declared below
        if window is not None:
            left, right = window
            if left is not None:
                vis = vis & (j >= i - left)
            if right is not None:
                vis = vis & (j <= i + right)
        vis = vis.expand(PB, PHq, Pq, Pk)
        if mask is not None:
            vis = vis & F.pad(mask.expand(B, Hq, Nq, Nk), (0, Pk - Nk, 0, Pq - Nq, 0, PHq - Hq, 0, PB - B),
                              value=False)
        vis = vis.contiguous()

        def mask_mod(b, h, q_idx, kv_idx):
            return vis[b, h, q_idx, kv_idx]

        block_mask = create_block_mask(mask_mod, PB, PHq, Pq, Pk, device=q.device)
        gqa = Hq != Hkv
        if on_cuda:
            # the dtype Flex forms q.k in: fp32, or fp64 for fp64 inputs
            factor = torch.tensor(scale, dtype=torch.float64 if q.dtype == torch.float64 else torch.float32,
                                  device=q.device)

            def score_mod(score, b, h, q_idx, kv_idx):
                return score * factor

            run = compiled_flex() if compile else flex_attention
            o, lse = run(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=1.0, enable_gqa=gqa,
                         return_lse=True)
        else:
            o, lse = flex_attention(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=gqa, return_lse=True)
        return o[:B, :Hq, :Nq, :dv], lse[:B, :Hq, :Nq]

    def precision(dtype, dot_precision=None, *, head_dim=None):
        name = _dtype_name(dtype)
        if on_cuda:
            dot = dot_precision or _half_dot(name) or "tf32"
            return _precision(input=name, dot=dot, accumulate="float32", output=name, exp="ex2.approx",
                              block_k=128, block_q=128)
        # Eager CPU FlexAttention materializes the scores in the input dtype's compute type.
        acc = "float64" if name == "float64" else "float32"
        dot = dot_precision or ("fp64" if name == "float64" else _half_dot(name) or "ieee")
        return _precision(input=name, dot=dot, accumulate=acc, output=name, exp="libm",
                          block_k=1 << 20, block_q=1 << 20)

    def compile_key(sig):
        B, Hq, Nq, d = sig.q
        return flex_padded_shape(B, Hq, sig.k[1], Nq, sig.k[2], d, sig.v[-1]), sig.dtype, sig.grad

    # FlexAttention has no backward on the CPU ("does not support backward on CPU"): declared on CUDA only.
    supports = (CAPABILITIES if on_cuda else CAPABILITIES - {"backward"}) - {"deterministic"}
    return KernelUnderTest(name="flex", supports=supports, fn=fn, precision_fn=precision,
                           domain=Domain(causal_alignment="top_left"), compile_key=compile_key if compile else None)

