"""Compile a JIT kernel for every input the suite will give it, once, before the suite starts.

A Triton kernel compiles one binary per combination of its constexprs and of its integer arguments'
specialization (head dim, GQA group, causal/window/mask flags; N, band offsets and strides == 1 or
divisible by 16). Under pytest-xdist each worker compiled those it met itself, the first examples of
every property at the same moment: most of the 125 s `validate ours` took on the H100.

`flashcheck validate --warm-up` (the default for `ours` and `flex` on CUDA) therefore, before the suite:
1. runs the suite once, in one process, on an exact float64 stand-in for the kernel (same name,
   capabilities, domain and precision model; exact, so every property holds and hypothesis draws the
   same inputs as for a correct kernel) that records each call's `Signature` (shapes, strides, dtype,
   flags, whether it needs a gradient: `StandIn`, plugin option --flashcheck-dry-run). Nothing is
   judged there (no references, bounds or comparisons: `flashcheck.properties.judge.judging`);
2. meanwhile starts one compile process per core (`serve`: imports, the CUDA context and Triton's
   one-time costs, `prime_triton`, while the dry run runs) and hands each idle one the next signature
   as they are recorded (`Schedule`): the one
   adding the most binaries not compiled or being compiled anywhere (`KernelUnderTest.compile_key`:
   for ours, the Triton binaries of its launches, `flashcheck.kernels.attention.launches` and `triton_binary`),
   so every binary compiles once, longest first, and a call whose binaries are all compiled is skipped;
3. the suite starts once every call is handed out (the last ones finish beside its start-up), its
   workers loading compiled kernels from Triton's on-disk cache.
A kernel that fails draws different inputs after its first failure: those compile in step 3 as before.
An exception in step 2 is ignored (step 3 meets it as a refusal).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    """What a JIT specialization can depend on: shapes, strides, dtype, flags (not the values)."""
    q: tuple
    k: tuple
    v: tuple
    dtype: str
    grad: bool
    causal: bool
    window: tuple | None
    mask: tuple | None  # the mask tensor's shape (broadcast dims of size 1 kept)
    scale: bool  # a scale was passed
    # q, k, v strides: those of the suite's tensors, not always the dense ones (numpy keeps odd strides on
    # size-1 dims, and the kernel passes every stride); None: dense
    strides: tuple | None = None

    @classmethod
    def of(cls, q, k, v, *, causal=False, scale=None, window=None, mask=None) -> "Signature":
        return cls(q=tuple(q.shape), k=tuple(k.shape), v=tuple(v.shape), dtype=str(q.dtype).replace("torch.", ""),
                   grad=bool(q.requires_grad), causal=bool(causal),
                   window=None if window is None else tuple(window),
                   mask=None if mask is None else tuple(mask.shape), scale=scale is not None,
                   strides=tuple(tuple(t.stride()) for t in (q, k, v)))

    @classmethod
    def from_dict(cls, data: dict) -> "Signature":
        data = dict(data)
        for name in ("q", "k", "v", "window", "mask"):
            if data[name] is not None:
                data[name] = tuple(data[name])
        if data.get("strides") is not None:
            data["strides"] = tuple(tuple(s) for s in data["strides"])
        return cls(**data)

    def tensor(self, which: str, device: str, dtype):
        """A random tensor with the shape and strides of q, k or v."""
        import torch

        i = "qkv".index(which)
        shape = getattr(self, which)
        x = torch.randn(shape, device=device, dtype=dtype)
        if self.strides is None or tuple(x.stride()) == self.strides[i]:
            return x
        return torch.empty_strided(shape, self.strides[i], device=device, dtype=dtype).copy_(x)


class StandIn:
    """An exact float64 attention with the kernel's conventions (causal=True means its declared
    alignment), recording every call's `Signature` to `path` (one JSON line each)."""

    def __init__(self, alignment: str, path: str):
        self.alignment = alignment
        self.path = path

    def __call__(self, q, k, v, *, causal=False, scale=None, window=None, mask=None):
        import torch

        with open(self.path, "a") as f:
            f.write(json.dumps(Signature.of(q, k, v, causal=causal, scale=scale, window=window,
                                            mask=mask).__dict__) + "\n")
        B, Hq, Nq, d = q.shape
        Nk = k.shape[2]
        scale = 1.0 / math.sqrt(d) if scale is None else scale
        group = Hq // k.shape[1]
        q64, k64, v64 = q.double(), k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
        s = scale * (q64 @ k64.transpose(-1, -2))
        from flashcheck.reference.masks import visibility

        vis = torch.from_numpy(visibility(B, Hq, Nq, Nk, causal=self.alignment if causal else False,
                                          window=window,
                                          mask=None if mask is None else mask.cpu().numpy())).to(q.device)
        s = s.masked_fill(~vis, float("-inf"))
        lse = torch.logsumexp(s, -1)
        dead = torch.isinf(lse)[..., None]  # fully masked rows: O = 0, LSE = -inf
        p = torch.where(dead, torch.zeros_like(s), torch.softmax(s.masked_fill(dead, 0.0), -1))
        return (p @ v64).to(q.dtype), lse.float()


def stand_in_for(kernel, path: str):
    """`kernel` (a KernelUnderTest) with its function replaced by a recording `StandIn`."""
    from flashcheck.adapters import KernelUnderTest

    return KernelUnderTest(name=kernel.name, supports=kernel.supports,
                           fn=StandIn(kernel.domain.causal_alignment, path), layout="bhnd",
                           precision_fn=kernel.precision_fn, domain=kernel.domain)


def signatures(paths) -> list[Signature]:
    seen = {}
    for path in paths:
        if not os.path.exists(path):
            continue
        for line in open(path):
            sig = Signature.from_dict(json.loads(line))
            seen.setdefault(sig, None)
    return list(seen)


def triton_binary(launch) -> tuple:
    """The binary Triton (3.x) compiles for a `flashcheck.kernels.attention.Launch`: one per kernel, constexprs,
    num_warps/num_stages, pointer dtypes and 16-byte alignments, and class of each integer argument:
    == 1 (made a constant), else its width and whether it is divisible by 16 (Triton 3.6 and 3.9 agree
    on these; a class finer than Triton's only costs a compile, never a wrong verdict). The grid is not
    part of it."""
    return (launch.kernel, launch.constexprs, launch.num_warps, launch.num_stages, launch.pointers,
            tuple(_int_class(x) for x in launch.ints))


def _int_class(x: int) -> str:
    if x == 1:
        return "1"
    width = "i32" if -2**31 <= x < 2**31 else "i64" if -2**63 <= x < 2**63 else "u64"
    return width + ("D" if x % 16 == 0 else "")


# Seconds to compile one binary of each of our kernels, 16 at once on the H100 host (bench/results/
# h100-2026-11-23c/validate: least squares over the warm-up's calls): the order of the calls only.
# Any other binary (Flex's graphs, a user kernel's call) counts 1.
BINARY_WEIGHT = {"attn_fwd_kernel": 4.5, "attn_bwd_preprocess_kernel": 0.1, "attn_bwd_dkdv_kernel": 1.55,
                 "attn_bwd_dq_kernel": 1.55}


def binaries(kernel, sig: Signature) -> frozenset:
    """What calling `kernel` on `sig` compiles: `kernel.compile_key(sig)` (a frozenset of binaries, or one
    hashable for one binary), else the signature itself (nothing known to be shared)."""
    if kernel.compile_key is None:
        return frozenset({sig})
    key = kernel.compile_key(sig)
    return key if isinstance(key, frozenset) else frozenset({key})


def weight(binary) -> float:
    return BINARY_WEIGHT.get(binary[0], 1.0) if isinstance(binary, tuple) and binary else 1.0


class Schedule:
    """Which signature an idle compile process calls next, as signatures arrive from the dry run: the one
    adding the most binaries that no process has compiled or is compiling (by weight: longest first,
    so backward-carrying calls spread over the processes first), preferring one that shares no binary
    with a call in flight elsewhere (two processes compiling one binary at once both compile it: Triton
    has no cross-process lock, only the on-disk cache a finished one fills). A signature whose binaries
    are all compiled is dropped."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.need: dict = {}
        self.pending: list = []
        self.done: set = set()
        self.flight: dict = {}  # process -> binaries its current call compiles
        self.calls = 0

    def add(self, sig: Signature) -> None:
        if sig not in self.need:
            self.need[sig] = binaries(self.kernel, sig)
            self.pending.append(sig)

    def binaries(self) -> set:
        return set().union(*self.need.values()) if self.need else set()

    def _busy(self) -> set:
        """The binaries being compiled now, anywhere."""
        return set().union(*self.flight.values()) if self.flight else set()

    def next(self, process) -> Signature | None:
        busy = self._busy()
        self.pending = [sig for sig in self.pending if not self.need[sig] <= self.done]
        best, best_key = None, None
        for sig in self.pending:
            new = self.need[sig] - self.done - busy
            if not new:
                continue
            key = (not (self.need[sig] - self.done) & busy, sum(weight(b) for b in new))
            if best_key is None or key > best_key:
                best, best_key = sig, key
        if best is not None:
            self.pending.remove(best)
            self.flight[process] = self.need[best] - self.done
            self.calls += 1
        return best

    def finished(self, process) -> None:
        self.done |= self.flight.pop(process, set())

    def idle(self) -> bool:
        return not self.flight

    def exhausted(self) -> bool:
        """Every binary of the pending signatures is compiled or being compiled: nothing left to hand out."""
        busy = self._busy()
        return all(self.need[sig] <= self.done | busy for sig in self.pending)


def call(kernel, sig: Signature, device: str):
    """The kernel on random inputs of `sig`'s shapes and strides (and its backward when `sig.grad`)."""
    import torch

    dtype = getattr(torch, sig.dtype)
    q, k, v = (sig.tensor(name, device, dtype).requires_grad_(sig.grad) for name in "qkv")
    kw = {"causal": sig.causal, "window": sig.window}
    if sig.mask is not None:
        kw["mask"] = torch.rand(sig.mask, device=device) < 0.7
    if sig.scale:
        kw["scale"] = 1.0 / math.sqrt(sig.q[-1])
    o, _ = kernel(q, k, v, **kw)
    if sig.grad:
        torch.autograd.grad(o, (q, k, v), torch.randn_like(o), allow_unused=True)


def prime_triton(device: str) -> None:
    """A process's one-time Triton costs (its CUDA helpers, built with the host compiler on a cold cache;
    the compiler back end; loading a module), paid at start-up, while the dry run records: on the H100
    host a compile process's first call took 11.5-14.4 s, the other forward-only calls 3.05 s on
    average. Compiles and launches our smallest kernel (Δ of one 16 x 16 head) through the launch the
    backward would make."""
    import torch

    from flashcheck.kernels.attention import Layout, launches
    from flashcheck.kernels.triton_bwd import attn_bwd_preprocess_kernel

    x = Layout.dense("float32", (1, 1, 16, 16))
    (pre,) = [launch for launch in launches(x, x, x, grad=True, interpret=not device.startswith("cuda"))
              if launch.kernel == "attn_bwd_preprocess_kernel"]
    o = torch.zeros(x.shape, device=device)
    delta = torch.empty(x.shape[:3], device=device)
    attn_bwd_preprocess_kernel[pre.grid](o, o, o, delta, *pre.ints, **dict(pre.constexprs))
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def serve(target: str, device: str, options: dict, source=sys.stdin, sink=sys.stdout) -> None:
    """A compile process: start up (imports, the kernel, the CUDA context) at once, so that this overlaps
    the dry run; then call the kernel on each signature read from `source` (one JSON line each; an
    empty line or the end: stop) and answer each with one line: the call's seconds."""
    from flashcheck.adapters import resolve

    kernel = resolve(target, device=device, **options)
    if device.startswith("cuda"):
        import torch

        torch.zeros(1, device=device)
        if target in ("ours", "ours-accurate"):
            try:
                prime_triton(device)
            except Exception:  # noqa: BLE001 - the first call pays it then
                pass
    for line in source:
        if not line.strip():
            break
        start = time.monotonic()
        try:
            call(kernel, Signature.from_dict(json.loads(line)), device)
            if device.startswith("cuda"):
                import torch

                torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a refusal: the suite meets and reports it
            pass
        sink.write(f"{time.monotonic() - start:.3f}\n")
        sink.flush()


@dataclass(frozen=True)
class WarmUp:
    """What `warm_up` did: signatures recorded, the binaries they need (None: the kernel has no
    compile_key), calls made, processes, times (s)."""
    signatures: int
    binaries: int | None
    calls: int
    processes: int
    recorded_s: float  # the dry run
    dispatched_s: float  # every call handed out (the suite starts then)
    compiled_s: float  # the last call ended
    busiest_s: float  # the most call time of one process

    def needs(self) -> str:
        return (f"{self.binaries} distinct compiled binaries by compile_key" if self.binaries is not None
                else "no compile_key: one compile each")

    def __str__(self) -> str:
        return (f"warm-up: {self.signatures} distinct kernel calls recorded in {self.recorded_s:.1f} s ({self.needs()}), "
                f"compiled by {self.calls} calls in {self.processes} processes in {self.compiled_s:.1f} s from the "
                f"start (busiest process {self.busiest_s:.1f} s of calls; the suite started at "
                f"{self.dispatched_s:.1f} s, when every call was handed out)")


class WarmingUp:
    """The warm-up under way (`warm_up`): the dry run recording, the compile processes calling."""

    def __init__(self, target: str, device: str, options: dict, dry_run: list[str], path: str, processes: int,
                 env: dict):
        import selectors

        from flashcheck.adapters import resolve

        self.schedule = Schedule(resolve(target, device=device, **options))
        self.path, self.processes = path, processes
        self.start = time.monotonic()
        # one thread each: the dry run and the compile processes run beside 15 others, and an idle
        # intra-op pool spinning on a busy core slows everything (the dry run took 24 s on the H100 host)
        env = dict(env)
        env.setdefault("OMP_NUM_THREADS", "1")
        cmd = [sys.executable, "-m", "flashcheck.warmup", target, "--device", device, "--options",
               json.dumps(options)]
        self.procs = [subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True, bufsize=1) for _ in range(processes)]
        self.recorder = subprocess.Popen(dry_run, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.sel = selectors.DefaultSelector()
        for i, p in enumerate(self.procs):
            self.sel.register(p.stdout, selectors.EVENT_READ, i)
        self.idle, self.alive = set(range(processes)), set(range(processes))
        self.busy_s = [0.0] * processes
        self.offset, self.recorded, self.dispatched, self.last = 0, None, None, 0.0
        self.log = os.environ.get("FLASHCHECK_WARMUP_LOG")
        self.current = {}
        self.thread = None
        self.at_dispatch = ""

    def _tell(self, i, sig):
        self.current[i] = (sig, time.monotonic() - self.start)
        try:
            self.procs[i].stdin.write(("" if sig is None else json.dumps(sig.__dict__)) + "\n")
            self.procs[i].stdin.flush()
        except OSError:  # it died (its calls compile in the suite)
            self.alive.discard(i)

    def step(self) -> None:
        """Read what was recorded, hand out calls to idle processes, wait (<= 50 ms) for one to answer."""
        schedule = self.schedule
        if self.recorded is None:
            ended = self.recorder.poll() is not None
            self.offset = _read_new(self.path, self.offset, schedule)
            if ended:
                self.recorded = time.monotonic() - self.start
        for i in sorted(self.idle & self.alive):
            sig = schedule.next(i)
            if sig is not None:
                self.idle.discard(i)
                self._tell(i, sig)
            elif self.recorded is not None and schedule.idle():
                self._tell(i, None)  # nothing left: stop
                self.alive.discard(i)
        if self.dispatched is None and self.recorded is not None and schedule.exhausted():
            self.dispatched = time.monotonic() - self.start
        if not self.alive:
            return
        for key, _ in self.sel.select(timeout=0.05):
            i = key.data
            line = self.procs[i].stdout.readline()
            if not line:  # ended (or died mid-call)
                self.sel.unregister(self.procs[i].stdout)
                self.alive.discard(i)
                schedule.flight.pop(i, None)
                continue
            self.busy_s[i] += float(line)
            self.last = time.monotonic() - self.start
            if self.log:
                sig, began = self.current[i]
                with open(self.log, "a") as f:
                    f.write(json.dumps({"process": i, "start": round(began, 2), "seconds": float(line),
                                        "end": time.time(),  # wall clock: later Triton cache files are the suite's
                                        "binaries": sorted(str(b[0]) if isinstance(b, tuple) else "call"
                                                           for b in schedule.flight.get(i, ())),
                                        "signature": sig.__dict__}) + "\n")
            schedule.finished(i)
            self.idle.add(i)

    def until_dispatched(self) -> "WarmingUp":
        """Return once the recording ended and every call is handed out (or all processes ended); the
        rest finishes in a background thread (`wait`), beside the suite's start-up."""
        import threading

        while self.alive and self.dispatched is None:
            self.step()
        if self.recorded is None:  # every compile process died: the dry run still ends
            self.recorder.wait()
            self.recorded = time.monotonic() - self.start
        if self.dispatched is None:
            self.dispatched = time.monotonic() - self.start
        self.at_dispatch = (f"warm-up: {len(self.schedule.need)} distinct kernel calls recorded in "
                            f"{self.recorded:.1f} s; the suite starts at {self.dispatched:.1f} s while the last "
                            f"{len(self.schedule.flight)} of {self.schedule.calls} compile calls finish")
        self.thread = threading.Thread(target=self._finish, daemon=True)
        self.thread.start()
        return self

    def _finish(self) -> None:
        while self.alive:
            self.step()
        for p in self.procs:  # told to stop; not waited for: their exit (a CUDA context each) overlaps the suite
            try:
                p.stdin.close()
            except OSError:
                pass

    def wait(self) -> WarmUp:
        if self.thread is not None:
            self.thread.join()
        keyed = self.schedule.kernel.compile_key is not None
        return WarmUp(signatures=len(self.schedule.need),
                      binaries=len(self.schedule.binaries()) if keyed else None, calls=self.schedule.calls,
                      processes=self.processes, recorded_s=self.recorded, dispatched_s=self.dispatched,
                      compiled_s=max(self.last, self.recorded), busiest_s=max(self.busy_s, default=0.0))

    def progress(self) -> str:
        """In words, when the suite starts."""
        return self.at_dispatch


def warm_up(target: str, device: str, options: dict, dry_run: list[str], path: str, processes: int,
            env: dict) -> WarmingUp:
    """Record the suite's calls (`dry_run`: the suite's command with --flashcheck-dry-run `path`) and
    compile them meanwhile: `processes` compile processes (`serve`) start with it, each signature is
    scheduled (`Schedule`) as soon as its line is written, one call per idle process at a time. Returns
    once every call is handed out; `.wait()` for the rest and the `WarmUp` summary.
    With FLASHCHECK_WARMUP_LOG=PATH, each call is appended to PATH (JSON lines: process, start and
    seconds, the kernels of the binaries it was to compile, the signature): where the time goes."""
    return WarmingUp(target, device, options, dry_run, path, processes, env).until_dispatched()


def _read_new(path: str, offset: int, schedule: Schedule) -> int:
    """Add the signatures of the complete lines written to `path` past `offset`; the new offset."""
    if not os.path.exists(path):
        return offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].decode().splitlines():
        if line.strip():
            schedule.add(Signature.from_dict(json.loads(line)))
    return offset + end


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m flashcheck.warmup",
                                description="a compile process: call a kernel on the signatures read from stdin")
    p.add_argument("target")
    p.add_argument("--device", required=True)
    p.add_argument("--options", default="{}", help="resolve() keyword arguments as JSON")
    args = p.parse_args(argv)
    serve(args.target, args.device, json.loads(args.options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
