"""Speed of flashcheck.kernels.attention beside torch SDPA (flash backend), bf16, on one CUDA GPU.

    PYTHONPATH=. python3 bench/kernel_speed.py            # table: ours vs SDPA flash, fwd and bwd
    PYTHONPATH=. python3 bench/kernel_speed.py --sweep    # try tile configs, print the best per d
    PYTHONPATH=. python3 bench/kernel_speed.py --variants --out DIR   # forward code-generation variants
        (tiles, TMA descriptors, warp specialization) beside the current config and cuDNN, in one
        process; writes variants_main.json (--ws: the warp-specialized ones, variants_ws.json)
    PYTHONPATH=. python3 bench/kernel_speed.py --accurate-ab --out DIR   # precision="accurate" / default
        forward time, A/B interleaved, for candidate accurate-mode tiles; writes accurate_ab.json
    PYTHONPATH=. python3 bench/kernel_speed.py --pipeline-ab --out DIR   # TileConfig.pipeline_qk (issue 10):
        each tile pair without/with the hand-pipelined QKᵀ, and cuDNN, interleaved; writes pipeline_ab.json
        (TRITON_INTERPRET=1 ... --pipeline-ab --dry-run: the same path on the CPU, tiny shapes, fp16)

TFLOP/s counts 4·B·H·Nq·Nk·d for the forward (two matmuls) and 2.5× that for the backward
(five matmuls), halved when causal; time is the median of triton.testing.do_bench.
Shapes: H = 2048 / d heads, B = 16384 / N, bf16, dense (no mask).

Measured 2026-11-22, H100 80GB HBM3 (nvidia-h100-x1), torch 2.11.0+cu130, triton 3.6.0,
`PYTHONPATH=. python3 bench/kernel_speed.py --no-check` (TFLOP/s):

       d      N causal |  ours fwd  sdpa fwd |  ours bwd  sdpa bwd
      64   1024  False |     342.1     285.1 |     316.4     208.6
      64   1024   True |     185.2     218.0 |     238.9     147.2
      64   4096  False |     396.0     308.4 |     362.9     267.6
      64   4096   True |     338.6     268.5 |     295.2     229.4
      64  16384  False |     403.4     311.6 |     367.5     282.7
      64  16384   True |     347.7     303.4 |     340.3     275.6
     128   1024  False |     363.6     327.1 |     320.3     220.3
     128   1024   True |     278.2     245.9 |     230.4     162.2
     128   4096  False |     444.9     342.8 |     389.0     288.3
     128   4096   True |     387.8     296.5 |     342.4     252.5
     128  16384  False |     463.2     346.4 |     410.7     309.9
     128  16384   True |     433.2     319.5 |     399.3     313.2

Tile sweep (--sweep, N = 8k) that chose flashcheck.kernels.attention.kernel_config: fwd 64×64/4 warps/3 stages
(d=128: 524 TFLOP/s non-causal vs 518 for 128×128/8 warps); bwd d=128 dK/dV 128-key tiles ×
64-query inner tiles, 8 warps, 3 stages (427); d=64 64×64/4 warps/3 stages (383).
"""
import argparse
import dataclasses
import functools
import itertools
import math
import statistics
import sys
import time

import torch
import triton
from triton.testing import do_bench

from flashcheck.kernels import attention

ka = sys.modules["flashcheck.kernels.attention"]  # the module (the package attribute is the function)


def _inputs(B, H, N, d, dtype=torch.bfloat16, device="cuda"):
    g = torch.Generator(device=device).manual_seed(0)
    mk = lambda: torch.randn(B, H, N, d, device=device, dtype=dtype, generator=g).requires_grad_()  # noqa: E731
    return mk(), mk(), mk()


def _flops(B, H, N, d, causal):
    f = 4.0 * B * H * N * N * d
    return f / 2 if causal else f


def _time_fwd_bwd(fn, q, k, v):
    fwd = do_bench(lambda: fn(q, k, v), warmup=25, rep=100, return_mode="median")
    o = fn(q, k, v)
    do = torch.randn_like(o)
    bwd = do_bench(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True),
                   warmup=25, rep=100, return_mode="median")
    return fwd, bwd


def _sdpa(causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def fn(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def _ours(causal):
    return lambda q, k, v: attention(q, k, v, causal=causal)


def check(B=2, H=4, N=1000, d=128):
    """Relative error of ours vs SDPA math in float32 (bf16 inputs), fwd and grads."""
    q, k, v = _inputs(B, H, N, d)
    for causal in (False, True):
        o = attention(q, k, v, causal=causal)
        do = torch.randn_like(o)
        g = torch.autograd.grad(o, (q, k, v), do)
        qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
        of = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
        gf = torch.autograd.grad(of, (qf, kf, vf), do.float())
        errs = [((a.float() - b).norm() / b.norm()).item() for a, b in zip((o, *g), (of, *gf))]
        print(f"check causal={causal}: rel err o/dq/dk/dv = " + " ".join(f"{e:.2e}" for e in errs))
        assert all(e < 2e-2 for e in errs), errs


def table():
    rows = []
    for d, N, causal in itertools.product((64, 128), (1024, 4096, 16384), (False, True)):
        H = 2048 // d
        B = max(1, 16384 // N)
        q, k, v = _inputs(B, H, N, d)
        fl = _flops(B, H, N, d, causal)
        res = {}
        for name, fn in (("ours", _ours(causal)), ("sdpa_flash", _sdpa(causal))):
            try:
                f, b = _time_fwd_bwd(fn, q, k, v)
                res[name] = (fl / f * 1e-9, 2.5 * fl / b * 1e-9)
            except Exception as e:  # noqa: BLE001 - report and continue
                print(f"{name} d={d} N={N} causal={causal}: {type(e).__name__}: {e}"[:300])
                res[name] = (math.nan, math.nan)
        rows.append((d, N, causal, res))
        del q, k, v
        torch.cuda.empty_cache()
    print(f"{'d':>4} {'N':>6} {'causal':>6} | {'ours fwd':>9} {'sdpa fwd':>9} | {'ours bwd':>9} {'sdpa bwd':>9}  (TFLOP/s)")
    for d, N, causal, res in rows:
        print(f"{d:>4} {N:>6} {str(causal):>6} | {res['ours'][0]:9.1f} {res['sdpa_flash'][0]:9.1f} | "
              f"{res['ours'][1]:9.1f} {res['sdpa_flash'][1]:9.1f}")


def sweep(N=8192):
    T = ka.TileConfig
    fwd_cands = [T(128, 64, 4, 3), T(128, 64, 8, 3), T(128, 128, 8, 3), T(128, 64, 8, 4),
                 T(128, 128, 8, 2), T(64, 64, 4, 3), T(128, 32, 4, 4)]
    bwd_cands = [(T(32, 128, 4, 3), T(128, 32, 4, 3)), (T(64, 128, 8, 2), T(128, 64, 8, 2)),
                 (T(64, 128, 8, 3), T(128, 64, 8, 3)), (T(32, 128, 8, 3), T(128, 32, 8, 3)),
                 (T(64, 64, 4, 3), T(64, 64, 4, 3)), (T(32, 64, 4, 4), T(64, 32, 4, 4))]
    for d in (64, 128):
        H, B = 2048 // d, 16384 // N
        q, k, v = _inputs(B, H, N, d)
        base = ka.kernel_config(d, torch.bfloat16)
        for causal in (False, True):
            fl = _flops(B, H, N, d, causal)
            best = None
            for c in fwd_cands:
                tiles = ka.KernelConfig(c, base.dkdv, base.dq)
                try:
                    t = do_bench(lambda: attention(q, k, v, causal=causal, tiles=tiles), warmup=10,
                                 rep=40, return_mode="median")
                    tf = fl / t * 1e-9
                except Exception as e:  # noqa: BLE001
                    print(f"  fwd d={d} {c}: {type(e).__name__}"[:200])
                    continue
                print(f"  fwd d={d} causal={causal} {c}: {tf:.1f}")
                best = max(best or (0, c), (tf, c), key=lambda x: x[0])
            print(f"BEST fwd d={d} causal={causal}: {best}")
            best = None
            for c1, c2 in bwd_cands:
                tiles = ka.KernelConfig(base.fwd, c1, c2)
                try:
                    o = attention(q, k, v, causal=causal, tiles=tiles)
                    do = torch.randn_like(o)
                    t = do_bench(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True),
                                 warmup=10, rep=40, return_mode="median")
                    tf = 2.5 * fl / t * 1e-9
                except Exception as e:  # noqa: BLE001
                    print(f"  bwd d={d} {c1} {c2}: {type(e).__name__}"[:200])
                    continue
                print(f"  bwd d={d} causal={causal} {c1} {c2}: {tf:.1f}")
                best = max(best or (0, c1, c2), (tf, c1, c2), key=lambda x: x[0])
            print(f"BEST bwd d={d} causal={causal}: {best}")
        del q, k, v
        torch.cuda.empty_cache()


def _cudnn(causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def fn(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def _variant_configs(d, ws=False):
    """Forward candidates per head dim: (precision, TileConfig). The first of each precision is the
    current table's choice (the reference for ratios and for bitwise equality). ws: only the
    warp-specialized candidates (run in a process of their own: a compiler crash there must not
    take the other measurements with it), else all others."""
    T = ka.TileConfig
    base = ka.kernel_config(d, torch.bfloat16).fwd
    acc_base = ka.kernel_config(d, torch.bfloat16, precision="accurate").fwd
    default = [T(128, 64, 4, 3), T(128, 64, 8, 3), T(128, 128, 8, 3), T(128, 128, 8, 2),
               T(64, 64, 4, 3, kv_desc=True), T(128, 64, 4, 3, kv_desc=True),
               T(128, 64, 8, 3, kv_desc=True), T(128, 128, 8, 3, kv_desc=True),
               T(128, 128, 8, 2, kv_desc=True),
               T(128, 128, 4, 3, kv_desc=True, warp_specialize=True),
               T(128, 64, 4, 3, kv_desc=True, warp_specialize=True),
               T(128, 128, 8, 3, kv_desc=True, warp_specialize=True)]
    accurate = [T(64, 64, 4, 2), T(64, 32, 4, 3), T(128, 64, 8, 3), T(128, 64, 8, 2),
                T(64, 64, 4, 3, kv_desc=True), T(128, 64, 8, 3, kv_desc=True),
                T(128, 64, 8, 3, kv_desc=True, warp_specialize=True)]
    default = [c for c in default if c != base and c.warp_specialize == ws]
    accurate = [c for c in accurate if c != acc_base and c.warp_specialize == ws]
    return [("default", c) for c in [base] + default] + [("accurate", c) for c in [acc_base] + accurate]


def _label(c) -> str:
    flags = "".join(f"+{f}" for f in ("kv_desc", "warp_specialize") if getattr(c, f))
    return f"{c.block_m}x{c.block_n}/{c.num_warps}w/{c.num_stages}s{flags}"


def variants(out=None, N=16384, rep=60, ws=False):
    """Forward time of every candidate of `_variant_configs` at B·N = 16k, H·d = 2048, bf16,
    non-causal and causal, d = 64 and 128, beside cuDNN in the same process. Prints, per cell,
    TFLOP/s, ours/cuDNN, time / the default's, and max |O − O_base| against the current config of
    the same precision mode (0 means bitwise equal: the arithmetic did not change)."""
    import time
    rows = []
    t_start = time.time()
    for d in (64, 128):
        H, B = 2048 // d, max(1, 16384 // N)
        q, k, v = _inputs(B, H, N, d)
        base_cfg = ka.kernel_config(d, torch.bfloat16)
        for causal in (False, True):
            fl = _flops(B, H, N, d, causal)
            with torch.no_grad():
                t_cudnn = do_bench(lambda: _cudnn(causal)(q, k, v), warmup=25, rep=rep, return_mode="median")
                ref = {}
                t_ref = {}
                for mode, c in _variant_configs(d, ws):
                    tiles = ka.KernelConfig(c, base_cfg.dkdv, base_cfg.dq)
                    run = lambda: attention(q, k, v, causal=causal, precision=mode, tiles=tiles)  # noqa: E731
                    try:
                        o = run()
                        t = do_bench(run, warmup=25, rep=rep, return_mode="median")
                    except Exception as e:  # noqa: BLE001 - a variant that does not compile is reported
                        print(f"d={d} causal={causal} {mode} {_label(c)}: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}"[:240], flush=True)
                        continue
                    ref.setdefault(mode, o)
                    t_ref.setdefault(mode, t)
                    diff = (o.float() - ref[mode].float()).abs().max().item()
                    r = dict(d=d, N=N, B=B, H=H, causal=causal, mode=mode, config=_label(c), ms=t,
                             tflops=fl / t * 1e-9, vs_cudnn=t_cudnn / t, vs_mode_base=t / t_ref[mode],
                             vs_default_base=t / t_ref["default"], max_diff_vs_base=diff,
                             cudnn_ms=t_cudnn)
                    rows.append(r)
                    print(f"d={d:3} causal={causal!s:5} {mode:8} {_label(c):42} {r['tflops']:6.1f} TF/s "
                          f"x{r['vs_cudnn']:.2f} cuDNN  t/base {r['vs_mode_base']:.3f}  "
                          f"t/default {r['vs_default_base']:.3f}  diff {diff:.1e}  "
                          f"[{time.time() - t_start:.0f}s]", flush=True)
            if out:  # after every cell: a time-limited run still brings back what it measured
                _write_variants(out, rows, "ws" if ws else "main")
        del q, k, v
        torch.cuda.empty_cache()
    print("\nBEST per cell (default: fastest; accurate: fastest, its time over the fastest default):")
    for d in (64, 128):
        for causal in (False, True):
            cell = [r for r in rows if r["d"] == d and r["causal"] == causal]
            if not cell:
                continue
            bd = min((r for r in cell if r["mode"] == "default"), key=lambda r: r["ms"])
            ba = min((r for r in cell if r["mode"] == "accurate"), key=lambda r: r["ms"], default=None)
            base = cell[0]
            line = (f"d={d} causal={causal!s:5} cuDNN {fl_str(base)}  default {base['tflops']:.0f} -> best "
                    f"{bd['config']} {bd['tflops']:.0f} TF/s (x{bd['vs_cudnn']:.2f} cuDNN)")
            if ba:
                acc0 = next(r for r in cell if r["mode"] == "accurate")
                line += (f" | accurate {acc0['ms'] / base['ms']:.2f}x -> best {ba['config']} "
                         f"{ba['ms'] / base['ms']:.2f}x of base default, {ba['ms'] / bd['ms']:.2f}x of best default")
            print(line)


def _write_variants(out, rows, tag):
    import json
    from pathlib import Path
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"variants_{tag}.json").write_text(json.dumps(dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
        rows=rows), indent=1))


def fl_str(r) -> str:
    return f"{r['tflops'] * r['ms'] / r['cudnn_ms']:.0f} TF/s"


def accurate_ab(out=None, N=16384, rounds=5, rep=30):
    """Cost of precision="accurate" over the default forward (each at its kernel_config tiles, or a
    candidate tile for the accurate one), and the previous default tile against today's, measured
    A/B interleaved: per round one timing of each, the ratio of the medians over the rounds;
    B·N = 16k, H·d = 2048, bf16."""
    import json
    import statistics
    from pathlib import Path
    T = ka.TileConfig
    candidates = {  # (precision, forward tile or None for kernel_config's)
        64: [("accurate", None), ("accurate", T(64, 64, 4, 4, kv_desc=True)),
             ("accurate", T(64, 128, 4, 3, kv_desc=True)), ("accurate", T(64, 64, 8, 3, kv_desc=True)),
             ("accurate", T(128, 64, 8, 3, kv_desc=True)), ("accurate", T(128, 64, 8, 4, kv_desc=True)),
             ("accurate", T(64, 32, 4, 4, kv_desc=True))],
        128: [("accurate", None), ("accurate", T(64, 64, 4, 3, kv_desc=True)),
              ("accurate", T(128, 64, 8, 3, kv_desc=True)), ("default", T(64, 64, 4, 3))]}
    rows = []
    for d, cands in candidates.items():
        H, B = 2048 // d, max(1, 16384 // N)
        q, k, v = _inputs(B, H, N, d)
        cfg = ka.kernel_config(d, torch.bfloat16)
        for causal in (False, True):
            with torch.no_grad():
                default = lambda: attention(q, k, v, causal=causal)  # noqa: E731
                ref = attention(q, k, v, causal=causal, precision="accurate")
                for mode, tile in cands:
                    tiles = None if tile is None else ka.KernelConfig(tile, cfg.dkdv, cfg.dq)
                    cand = lambda: attention(q, k, v, causal=causal, precision=mode, tiles=tiles)  # noqa: E731
                    try:
                        diff = (cand().float() - ref.float()).abs().max().item() if mode == "accurate" else 0.0
                        t_def, t_cand = [], []
                        for _ in range(rounds):
                            t_def.append(do_bench(default, warmup=10, rep=rep, return_mode="median"))
                            t_cand.append(do_bench(cand, warmup=10, rep=rep, return_mode="median"))
                    except Exception as e:  # noqa: BLE001 - report and go on
                        print(f"d={d} causal={causal} {mode} {tile}: {type(e).__name__}"[:200], flush=True)
                        continue
                    name = "kernel_config" if tile is None else _label(tile)
                    r = dict(d=d, N=N, causal=causal, precision=mode, tile=name, default=_label(cfg.fwd),
                             default_ms=statistics.median(t_def), ms=statistics.median(t_cand),
                             ratio=statistics.median(t_cand) / statistics.median(t_def),
                             max_diff_vs_accurate_kernel_config=diff)
                    rows.append(r)
                    print(f"AB d={d:3} causal={causal!s:5} {mode:8} {name:24} / default {r['default']:14}"
                          f" = {r['ratio']:.3f}  ({r['ms']:.3f} / {r['default_ms']:.3f} ms)  diff {diff:.1e}",
                          flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "accurate_ab.json").write_text(json.dumps(dict(
            device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
            rounds=rounds, rows=rows), indent=1))


@dataclasses.dataclass(frozen=True)
class AbCell:
    """One pipelined candidate in one cell of `pipeline_ab`: tile `tile` with pipeline_qk against the same
    tile without it (its twin: the same arithmetic), the table's tile (kernel_config: today's default) and
    cuDNN, at one shape. Times are medians over the rounds (ms); ratio_twin / ratio_table: median over the
    rounds of t_pipelined / t_twin and / t_table (< 1: pipelining is faster), with their extremes;
    x_cudnn_*: t_cudnn / t (> 1: faster than cuDNN); stages: those launched (pipelined, twin; fewer than
    asked when the shared memory does not fit); diff_o / diff_lse: max |pipelined − twin| (must be 0)."""
    d: int
    N: int
    B: int
    H: int
    causal: bool
    tile: str
    pipelined_ms: float
    twin_ms: float
    table_ms: float
    cudnn_ms: float
    ratio_twin: float
    ratio_twin_lo: float
    ratio_twin_hi: float
    ratio_table: float
    ratio_table_lo: float
    ratio_table_hi: float
    x_cudnn_table: float
    x_cudnn_pipelined: float
    stages: tuple
    diff_o: float
    diff_lse: float


def _pipeline_candidates(d: int) -> list:
    """Tiles measured without and with pipeline_qk per head dim, the table's first. Chosen from what fits
    with the pipelined loop's extra buffers (bench/wgmma_schedule.py, sm_90a shared memory ≤ 227 KiB):
    at d = 128 the table's 128×128/8w/3s needs 288 KiB pipelined (it would fall back to 2 stages: measured
    as 128×128/8w/2s, next to its own twin), 128×64/8w/3s 160 KiB, 64×64/4w/2s 104 KiB (two blocks per SM);
    at d = 64 the table's 64×64/4w/3s 72 KiB and 128×64/8w/3s (0.98× the table's time in 2026-11-23b)."""
    T = ka.TileConfig
    table = ka.kernel_config(d, torch.bfloat16, interpret=False).fwd
    others = {64: [T(128, 64, 8, 3)], 128: [T(128, 128, 8, 2), T(128, 64, 8, 3), T(64, 64, 4, 2)]}[d]
    return [table] + [c for c in others if c != table]


def _median_ms(fn, dry_run: bool, rep: int) -> float:
    """Median time of fn() in ms: do_bench on the GPU; on the CPU (dry run) two timed calls."""
    if not dry_run:
        return do_bench(fn, warmup=10, rep=rep, return_mode="median")
    ts = []
    for _ in range(2):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


class _StagesLaunched:
    """Records the num_stages of the forward's last launch (`attention._launch_fitting` lowers it when a
    variant's shared memory does not fit): wraps the kernel it is handed."""

    def __init__(self):
        self.stages = None
        self._fitting = ka._launch_fitting

    def __enter__(self):
        def fitting(kernel, grid, num_stages, *args, **kwargs):
            rec = self

            class Recording:
                def __getitem__(self, g):
                    def launch(*a, num_stages, **kw):
                        out = kernel[g](*a, num_stages=num_stages, **kw)
                        rec.stages = num_stages
                        return out
                    return launch
            return self._fitting(Recording(), grid, num_stages, *args, **kwargs)
        ka._launch_fitting = fitting
        return self

    def __exit__(self, *exc):
        ka._launch_fitting = self._fitting


def pipeline_ab(out=None, rounds=5, rep=30, dry_run=False):
    """TileConfig.pipeline_qk (Q K_{t+1}ᵀ issued before tile t's exponentials) against the same tiles
    without it, the table's tile and cuDNN, timed interleaved: per round one median timing of each, the
    order rotated every round; B·N = 16k, H·d = 2048, bf16, d = 64/128, N = 1k/4k/16k, causal or not. Also
    max |O − O'| and |LSE − LSE'| against the twin (must be 0) and the stages each launch used. dry_run: the
    same path through the interpreter (TRITON_INTERPRET=1) with tiny shapes, fp16, SDPA's math backend for
    cuDNN and wall-clock timing: it checks the script, never the speed."""
    import json
    from pathlib import Path
    if dry_run and not ka._interpreting():
        raise SystemExit("--dry-run needs TRITON_INTERPRET=1 in the environment (set before Triton is imported)")
    if not dry_run and not torch.cuda.is_available():
        raise SystemExit("--pipeline-ab measures on a CUDA GPU and none is visible; "
                         "TRITON_INTERPRET=1 ... --pipeline-ab --dry-run checks the script on the CPU")
    device, dtype = ("cpu", torch.float16) if dry_run else ("cuda", torch.bfloat16)
    sizes = (96, 288) if dry_run else (1024, 4096, 16384)
    cells = []
    for d, N, causal in itertools.product((64, 128), sizes, (False, True)):
        H, B = (2, 1) if dry_run else (2048 // d, max(1, 16384 // N))
        q, k, v = _inputs(B, H, N, d, dtype, device)
        cfg = ka.kernel_config(d, dtype, interpret=False)
        if dry_run:
            cudnn = functools.partial(torch.nn.functional.scaled_dot_product_attention, q, k, v, is_causal=causal)
        else:
            cudnn = functools.partial(_cudnn(causal), q, k, v)
        runs, outs, stages = {}, {}, {}  # keyed (tile, pipelined)
        with torch.no_grad():
            for tile in _pipeline_candidates(d):
                for pipe in (False, True):
                    tiles = ka.KernelConfig(dataclasses.replace(tile, pipeline_qk=pipe), cfg.dkdv, cfg.dq)
                    fn = functools.partial(attention, q, k, v, causal=causal, return_lse=True, tiles=tiles)
                    try:
                        with _StagesLaunched() as launched:
                            outs[tile, pipe] = fn()
                    except Exception as e:  # noqa: BLE001 - a variant that does not compile is reported, the rest runs
                        print(f"d={d} N={N} causal={causal} {_label(tile)} pipeline_qk={pipe}: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}"[:300], flush=True)
                        continue
                    runs[tile, pipe], stages[tile, pipe] = fn, launched.stages
            times = _interleaved({**runs, "cudnn": cudnn}, rounds, rep, dry_run)
        table = _pipeline_candidates(d)[0]
        for tile in _pipeline_candidates(d):
            if (tile, True) not in runs or (tile, False) not in runs or (table, False) not in runs:
                continue
            tp, tt, tb, tc = (times[n] for n in ((tile, True), (tile, False), (table, False), "cudnn"))
            r_twin = [a / b for a, b in zip(tp, tt)]
            r_table = [a / b for a, b in zip(tp, tb)]
            (o0, l0), (o1, l1) = outs[tile, False], outs[tile, True]
            finite = torch.isfinite(l0) & torch.isfinite(l1)
            med = statistics.median
            cell = AbCell(d, N, B, H, causal, _label(tile), med(tp), med(tt), med(tb), med(tc),
                          med(r_twin), min(r_twin), max(r_twin), med(r_table), min(r_table), max(r_table),
                          med(tc) / med(tb), med(tc) / med(tp), (stages[tile, True], stages[tile, False]),
                          (o1.float() - o0.float()).abs().max().item(),
                          max((l1 - l0)[finite].abs().max().item() if finite.any() else 0.0,
                              float((torch.isfinite(l0) != torch.isfinite(l1)).any())))
            cells.append(cell)
            print(f"AB d={d:3} N={N:5} causal={cell.causal!s:5} {cell.tile:14} pipelined/twin {cell.ratio_twin:.3f} "
                  f"[{cell.ratio_twin_lo:.3f}, {cell.ratio_twin_hi:.3f}] /table {cell.ratio_table:.3f}  x cuDNN "
                  f"{cell.x_cudnn_table:.2f} -> {cell.x_cudnn_pipelined:.2f}  stages {cell.stages}  "
                  f"diff O {cell.diff_o:.1e} LSE {cell.diff_lse:.1e}", flush=True)
        if out:  # after every cell: a time-limited run still brings back what it measured
            Path(out).mkdir(parents=True, exist_ok=True)
            (Path(out) / ("pipeline_ab_dry_run.json" if dry_run else "pipeline_ab.json")).write_text(json.dumps(dict(
                device="cpu (interpreter)" if dry_run else torch.cuda.get_device_name(), torch=torch.__version__,
                triton=triton.__version__, rounds=rounds, dry_run=dry_run,
                cells=[dataclasses.asdict(c) for c in cells]), indent=1))
        del q, k, v, outs
        if not dry_run:
            torch.cuda.empty_cache()
    print("\nSUMMARY pipeline_qk: t pipelined / t twin (same tile, no pipelining) and / t table (today's default), "
          "medians of rounds; x cuDNN = t_cuDNN / t; diff vs twin must be 0"
          + ("  DRY RUN: CPU interpreter, times mean nothing" if dry_run else ""))
    print(f"{'d':>4} {'N':>6} {'causal':>6} {'tile':14} {'/twin':>6} {'lo':>6} {'hi':>6} {'/table':>7} "
          f"{'xcuDNN':>7} {'->pipe':>7} {'stages':>7} {'diff O':>8} {'diff LSE':>8}")
    for c in cells:
        print(f"{c.d:>4} {c.N:>6} {c.causal!s:>6} {c.tile:14} {c.ratio_twin:6.3f} {c.ratio_twin_lo:6.3f} "
              f"{c.ratio_twin_hi:6.3f} {c.ratio_table:7.3f} {c.x_cudnn_table:7.2f} {c.x_cudnn_pipelined:7.2f} "
              f"{'%s/%s' % c.stages:>7} {c.diff_o:8.1e} {c.diff_lse:8.1e}")
    bad = [c for c in cells if c.diff_o != 0 or c.diff_lse != 0]
    print(f"bitwise: {len(cells) - len(bad)} of {len(cells)} pipelined kernels equal to their twins" + (
        "; DIFFER: " + ", ".join(f"d={c.d} N={c.N} causal={c.causal} {c.tile}" for c in bad) if bad else ""))
    return cells


def _interleaved(fns: dict, rounds: int, rep: int, dry_run: bool) -> dict:
    """{name: [ms per round]}: per round one median timing of every fn, the order rotated every round."""
    names = list(fns)
    times = {n: [] for n in names}
    for r in range(rounds):
        for i in range(len(names)):
            n = names[(i + r) % len(names)]
            times[n].append(_median_ms(fns[n], dry_run, rep))
    return times


@dataclasses.dataclass(frozen=True)
class TileRow:
    """One candidate in one cell of `tiles_ab`: `part` (order / bwd / fwd), pass timed, the candidate, its
    median time, / the table's (median of per-round ratios), x cuDNN (t_cuDNN / t) and the max |diff| of
    every output against the table's run (0 = bit for bit)."""
    part: str
    d: int
    N: int
    B: int
    H: int
    causal: bool
    timed: str
    candidate: str
    ms: float
    tflops: float
    ratio_table: float
    ratio_lo: float
    ratio_hi: float
    x_cudnn: float
    diff: float


def _tiles_candidates(d: int) -> dict:
    """Candidate tiles per part for head dim d: the table's first (kernel_config, bf16)."""
    T = ka.TileConfig
    cfg = ka.kernel_config(d, torch.bfloat16, interpret=False)
    K = ka.KernelConfig
    order = [("ascending", K(*(dataclasses.replace(t, heavy_first=False) for t in (cfg.fwd, cfg.dkdv, cfg.dq)))),
             ("heavy_first", K(*(dataclasses.replace(t, heavy_first=True) for t in (cfg.fwd, cfg.dkdv, cfg.dq))))]
    if d <= 64:
        dkdv = [T(32, 128, 4, 3), T(64, 128, 8, 3), T(32, 64, 4, 4), T(64, 128, 4, 2), T(32, 128, 8, 2)]
        dq = [T(128, 64, 8, 3), T(128, 32, 4, 3), T(64, 32, 4, 4), T(128, 64, 4, 2), T(128, 128, 8, 2)]
        fwd = [T(64, 32, 4, 3), T(128, 64, 8, 3), T(64, 64, 4, 2), T(128, 64, 4, 3), T(64, 128, 4, 2)]
    else:
        dkdv = [T(32, 128, 8, 3), T(32, 128, 4, 3), T(64, 128, 8, 2), T(64, 64, 4, 3), T(32, 64, 4, 3)]
        dq = [T(128, 128, 8, 2), T(128, 32, 8, 3), T(64, 64, 4, 3), T(128, 64, 8, 2), T(64, 128, 8, 2)]
        fwd = [T(64, 64, 4, 3), T(128, 64, 8, 3), T(64, 128, 4, 2), T(128, 128, 8, 2)]
    bwd = [("table", cfg)] + [(f"dkdv {_label(t)}", K(cfg.fwd, t, cfg.dq)) for t in dkdv] \
        + [(f"dq {_label(t)}", K(cfg.fwd, cfg.dkdv, t)) for t in dq]
    # gluon_bwd's dK/dV query tile (bench/NOTES.md, "Session 2026-11-27f": the backward's limiter): the Gluon
    # engine's tiles, its dK/dV kernel with 32 or 64 query rows (64 spills 80-212 bytes on Triton 3.6, none at 32)
    # At d = 64 (its table tile 128 rows, 2 deep) the 64-row tile again: with the LSE read before the products
    # (gluon_bwd LSE_FIRST, 2026-11-30) it compiles without a spill on Triton 3.6 (the 128-row tile: 14-54 local
    # instructions in its tile loops)
    g = ka.kernel_config(d, torch.bfloat16, interpret=False, engine="gluon")
    gluon_dkdv = [("table", g)] + [(f"gluon dkdv {_label(t)}", K(g.fwd, t, g.dq)) for t in ((
        T(64, 128, 8, 3, gluon=True), T(64, 128, 8, 4, gluon=True)) if d <= 64 else (
        T(32, 128, 8, 4, gluon=True), T(64, 128, 8, 3, gluon=True), T(64, 128, 8, 2, gluon=True),
        T(32, 128, 8, 3, gluon=True))) if (t.block_m, t.num_stages) != (g.dkdv.block_m, g.dkdv.num_stages)]
    return dict(order=order, bwd=bwd, fwd=[("table", cfg)] + [(f"fwd {_label(t)}", K(t, cfg.dkdv, cfg.dq))
                                                              for t in fwd], gluon_dkdv=gluon_dkdv)


def tiles_ab(out=None, rounds=3, rep=30, dry_run=False, parts=("order", "bwd", "fwd")):
    """Issue 10's tile and order A/B, bf16, B·N = 16k, H·d = 2048, one process, interleaved rounds, cuDNN beside:
    - order: TileConfig.heavy_first (query blocks from the last one under a band) against the ascending order,
      causal, d 64/128, N 1k/4k/16k, forward and backward; the outputs must be bit for bit equal;
    - bwd: the backward's dK/dV tiles (dQ at the table's) and dQ tiles (dK/dV at the table's), d 64/128, N 4k/16k,
      causal or not (tile changes move the accumulation: diff reported, not required 0);
    - fwd: forward tiles at N = 1k (the small-N cells), causal or not;
    - gluon_dkdv: gluon_bwd's dK/dV query tile (32 or 64 rows, stages) under the Gluon engine's tiles, d = 128,
      N 1k/4k/16k, causal or not; gluon_dkdv64 the same at d = 64 (64 rows against the table's 128).
    Prints a row per candidate and writes tiles_ab.json after every cell (a time-limited run keeps what it got)."""
    import json
    from pathlib import Path
    if dry_run and not ka._interpreting():
        raise SystemExit("--dry-run needs TRITON_INTERPRET=1 in the environment (set before Triton is imported)")
    if not dry_run and not torch.cuda.is_available():
        raise SystemExit("--tiles-ab measures on a CUDA GPU; TRITON_INTERPRET=1 ... --tiles-ab --dry-run checks the script")
    device, dtype = ("cpu", torch.float16) if dry_run else ("cuda", torch.bfloat16)
    rows = []
    cells = []
    for part in parts:
        if part == "order":
            cells += [(part, d, N, True, timed) for d in (64, 128) for N in ((96,) if dry_run else (1024, 4096, 16384))
                      for timed in ("fwd", "bwd")]
        elif part == "bwd":
            cells += [(part, d, N, c, "bwd") for d in (64, 128) for N in ((96,) if dry_run else (4096, 16384))
                      for c in (False, True)]
        elif part in ("gluon_dkdv", "gluon_dkdv64"):  # d = 128 (or 64), every N of issue 10's table
            cells += [("gluon_dkdv", 64 if part.endswith("64") else 128, N, c, "bwd")
                      for N in ((96,) if dry_run else (1024, 4096, 16384)) for c in (False, True)]
        else:
            cells += [(part, d, N, c, "fwd") for d in (64, 128) for N in ((96,) if dry_run else (1024,))
                      for c in (False, True)]
    if not dry_run:
        _warm_compiles(cells)
    for part, d, N, causal, timed in cells:
        H, B = (2, 1) if dry_run else (2048 // d, max(1, 16384 // N))
        q, k, v = _inputs(B, H, N, d, dtype, device)
        do = torch.randn(B, H, N, d, device=device, dtype=dtype, generator=torch.Generator(device=device).manual_seed(1))
        fl = _flops(B, H, N, d, causal) * (2.5 if timed == "bwd" else 1.0)
        cands = _tiles_candidates(d)[part]
        fns, outs = {}, {}
        for name, tiles in cands:
            try:
                if timed == "fwd":
                    with torch.no_grad():
                        outs[name] = attention(q, k, v, causal=causal, return_lse=True, tiles=tiles)
                    fns[name] = functools.partial(_no_grad_call, attention, q, k, v, causal=causal, tiles=tiles)
                else:
                    o = attention(q, k, v, causal=causal, tiles=tiles)
                    g = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
                    outs[name] = (o.detach(), *g)
                    fns[name] = functools.partial(torch.autograd.grad, o, (q, k, v), do, retain_graph=True)
            except Exception as e:  # noqa: BLE001 - a candidate that does not compile or fit is reported
                print(f"{part} d={d} N={N} causal={causal} {name}: {type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''}"[:300], flush=True)
        if dry_run:
            ref = functools.partial(torch.nn.functional.scaled_dot_product_attention, q, k, v, is_causal=causal)
        else:
            ref = functools.partial(_cudnn(causal), q, k, v)
        if timed == "fwd":
            fns["cudnn"] = functools.partial(_no_grad_call, ref)
        else:
            o_ref = ref()
            fns["cudnn"] = functools.partial(torch.autograd.grad, o_ref, (q, k, v), do, retain_graph=True)
        times = _interleaved(fns, rounds, rep, dry_run)
        table = cands[0][0] if part != "order" else "ascending"
        med = statistics.median
        for name, _ in cands:
            if name not in times or table not in times:
                continue
            r = [a / b for a, b in zip(times[name], times[table])]
            diff = max((a.float() - b.float()).nan_to_num(float("inf")).abs().max().item()
                       for a, b in zip(outs[name], outs[table]))
            row = TileRow(part, d, N, B, H, causal, timed, name, med(times[name]), fl / med(times[name]) * 1e-9,
                          med(r), min(r), max(r), med(times["cudnn"]) / med(times[name]), diff)
            rows.append(row)
            print(f"{part:5} d={d:3} N={N:5} causal={causal!s:5} {timed} {name:26} {row.ms:8.3f} ms {row.tflops:6.1f} "
                  f"TFLOP/s  /{table} {row.ratio_table:.3f} [{row.ratio_lo:.3f}, {row.ratio_hi:.3f}]  x cuDNN "
                  f"{row.x_cudnn:.2f}  diff {row.diff:.1e}", flush=True)
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            (Path(out) / ("tiles_ab_dry_run.json" if dry_run else "tiles_ab.json")).write_text(json.dumps(dict(
                device="cpu (interpreter)" if dry_run else torch.cuda.get_device_name(), torch=torch.__version__,
                triton=triton.__version__, rounds=rounds, rep_ms=rep, dry_run=dry_run,
                rows=[dataclasses.asdict(x) for x in rows]), indent=1))
        del q, k, v, do, outs, fns
        if not dry_run:
            torch.cuda.empty_cache()
    bad = [x for x in rows if x.part == "order" and x.diff != 0]
    print(f"order: {sum(x.part == 'order' for x in rows) - len(bad)} of {sum(x.part == 'order' for x in rows)} "
          "rows bit for bit" + (": DIFFER " + ", ".join(f"d={x.d} N={x.N} {x.timed}" for x in bad) if bad else ""))
    return rows


def _warm_one(part: str, d: int, causal: bool, timed: str, name: str) -> str:
    """Compile one candidate (a small input of the timed layout: Triton specializes on divisibility by 16,
    which N = 256 shares with the timed N), in a worker process: fills Triton's on-disk cache."""
    try:
        tiles = dict(_tiles_candidates(d)[part])[name]
        q, k, v = _inputs(1, 2, 256, d)
        o = attention(q, k, v, causal=causal, tiles=tiles)
        if timed == "bwd":
            torch.autograd.grad(o, (q, k, v), torch.ones_like(o))
        torch.cuda.synchronize()
        return ""
    except Exception as e:  # noqa: BLE001 - reported by the timed run again
        return f"{part} d={d} causal={causal} {name}: {type(e).__name__}"


def _warm_compiles(cells, workers: int = 12) -> None:
    """Every candidate of `cells` compiled by `workers` processes at once (compiles dominate the call otherwise)."""
    import concurrent.futures
    import multiprocessing
    jobs = sorted({(part, d, causal, timed, name) for part, d, _, causal, timed in cells
                   for name, _ in _tiles_candidates(d)[part]})
    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
        failed = [m for m in ex.map(_warm_one, *zip(*jobs)) if m]
    print(f"warm: {len(jobs)} compiles in {time.perf_counter() - t0:.0f} s" + (f"; failed: {failed}" if failed else ""),
          flush=True)


def _no_grad_call(fn, *args, **kwargs):
    with torch.no_grad():
        return fn(*args, **kwargs)


def profile_once(d=128, N=16384, causal=False, precision="default", backward=False):
    """A few launches of the forward, and with `backward` of the backward's kernels too (for ncu
    --kernel-name / --launch-skip / --launch-count)."""
    H, B = 2048 // d, max(1, 16384 // N)
    q, k, v = _inputs(B, H, N, d)
    for _ in range(5):
        if backward:
            o = attention(q, k, v, causal=causal, precision=precision)
            torch.autograd.grad(o, (q, k, v), torch.ones_like(o))
        else:
            with torch.no_grad():
                attention(q, k, v, causal=causal, precision=precision)
    torch.cuda.synchronize()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--ws", action="store_true", help="with --variants: the warp-specialized ones")
    ap.add_argument("--profile-once", action="store_true")
    ap.add_argument("--accurate-ab", action="store_true",
                    help="cost of precision='accurate' over the default forward, A/B interleaved")
    ap.add_argument("--pipeline-ab", action="store_true",
                    help="TileConfig.pipeline_qk against the same tiles without it and cuDNN, interleaved")
    ap.add_argument("--tiles-ab", action="store_true",
                    help="heavy_first order, backward tiles and small-N forward tiles against the table, interleaved")
    ap.add_argument("--parts", default="order,bwd,fwd",
                    help="with --tiles-ab: which parts, in this order (order, bwd, fwd, gluon_dkdv, gluon_dkdv64)")
    ap.add_argument("--dry-run", action="store_true",
                    help="with --pipeline-ab / --tiles-ab: the same path on the CPU (TRITON_INTERPRET=1), tiny shapes")
    ap.add_argument("--precision", default="default")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--N", type=int, default=16384, help="with --profile-once")
    ap.add_argument("--causal", action="store_true", help="with --profile-once")
    ap.add_argument("--backward", action="store_true", help="with --profile-once: the backward's kernels too")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-check", action="store_true")
    a = ap.parse_args()
    if a.pipeline_ab:  # before any CUDA query: it refuses cleanly without a GPU unless --dry-run
        print(torch.__version__, triton.__version__, "interpreter" if a.dry_run else
              torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device")
        pipeline_ab(a.out, dry_run=a.dry_run)
        sys.exit(0)
    if a.tiles_ab:
        print(torch.__version__, triton.__version__, "interpreter" if a.dry_run else
              torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device")
        tiles_ab(a.out, dry_run=a.dry_run, parts=tuple(a.parts.split(",")))
        sys.exit(0)
    print(torch.__version__, triton.__version__, torch.cuda.get_device_name())
    if a.profile_once:
        profile_once(d=a.d, N=a.N, causal=a.causal, precision=a.precision, backward=a.backward)
        sys.exit(0)
    if a.variants:
        variants(a.out, ws=a.ws)
        sys.exit(0)
    if a.accurate_ab:
        accurate_ab(a.out)
        sys.exit(0)
    if not a.no_check:
        check()
    if a.sweep:
        sweep()
    table()
