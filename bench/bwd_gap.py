"""Where our backward's time goes between its kernels' sum and what bench/run.py times (issue 10): at d = 128,
N = 16k, run.py's do_bench median of one backward was 12.34 ms (2026-11-28, call 2) while the kernels' times add up
to ~10.9 ms (bench/bwd_split.py, the dK/dV kernel at 650 TFLOP/s of its 4 products, the dQ kernel at 787 of its 3);
cuDNN's two differ by 0.4 ms. For each cell and backend, in one process on the same inputs:

- `bench`: triton.testing.do_bench median of the forward (no grad) and of torch.autograd.grad (run.py's timed calls),
  rep 100 ms and 1000 ms (a longer run: the clocks under sustained load);
- `events`: CUDA events around 10 back-to-back calls, no L2 flush between them;
- `kernels`: the torch.profiler kernel times of 5 calls (all kernels, ms per call) and their sum, and the span from
  the first kernel's start to the last one's end per call (the gaps between kernels included);
- `graph`: triton.testing.do_bench_cudagraph median of the forward (captured once, replayed: no host time inside;
  the backward's autograd.grad does not capture, cuDNN's nor ours);
- the board power and SM clock sampled every 10 ms during the 1 s run (pynvml);
- `host`: the host time of one call's launches (perf_counter around autograd.grad, no synchronize);
- the SM clock (pynvml, MHz) after each measurement where pynvml is there.

    PYTHONPATH=$PWD python3 bench/bwd_gap.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(1, _ROOT)

CELLS = ((128, 16384, False), (128, 16384, True), (64, 16384, False), (128, 4096, False), (128, 1024, False),
         (128, 1024, True), (64, 1024, True))


def _clock() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM)
    except Exception:
        return None


class _Sampler:
    """Board power (W) and SM clock (MHz) sampled every 10 ms by pynvml while in the `with` block: their means."""

    def __enter__(self):
        import threading

        self.samples, self.stop = [], threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            self.thread = None
            return self

        def loop():
            while not self.stop.is_set():
                self.samples.append((pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,
                                     pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)))
                time.sleep(0.01)
        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        n = len(self.samples) or 1
        self.watts = sum(w for w, _ in self.samples) / n if self.samples else None
        self.mhz = sum(c for _, c in self.samples) / n if self.samples else None
        return False


def _profile(bwd, reps: int = 5) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            bwd()
        torch.cuda.synchronize()
    kernels, spans = {}, []
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
    for e in events:
        kernels[e.name[:70]] = kernels.get(e.name[:70], 0.0) + e.time_range.elapsed_us() / reps / 1e3
    per = len(events) // reps if reps else 0
    for r in range(reps):
        chunk = events[r * per:(r + 1) * per]
        if chunk:
            spans.append((chunk[-1].time_range.end - chunk[0].time_range.start) / 1e3)
    return {"kernels_ms": kernels, "sum_ms": sum(kernels.values()), "span_ms": spans, "per_backward": per}


def _measure(fn, row: dict) -> dict:
    import torch
    from triton.testing import do_bench

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    row["bench_ms"] = do_bench(fn, warmup=25, rep=100, return_mode="median")
    row["clock_after_bench"] = _clock()
    with _Sampler() as sampled:
        row["bench_long_ms"] = do_bench(fn, warmup=25, rep=1000, return_mode="median")
    row["clock_after_long"] = _clock()
    row["watts_long"], row["mhz_long"] = sampled.watts, sampled.mhz
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(10):
        fn()
    b.record()
    torch.cuda.synchronize()
    row["events_ms"] = a.elapsed_time(b) / 10
    hosts = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        hosts.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    row["host_ms"] = statistics.median(hosts)
    row["graph_ms"] = "not captured (autograd.grad's capture fails for both backends)"
    if row["part"] == "fwd":  # the same call replayed from a CUDA graph: no host time between the start and end
        from triton.testing import do_bench_cudagraph

        row["graph_ms"] = do_bench_cudagraph(fn, rep=100, return_mode="median")
    row.update(_profile(fn))
    row["clock_after_profile"] = _clock()
    span = statistics.median(row["span_ms"]) if row["span_ms"] else float("nan")
    print(f"d={row['d']} N={row['N']} causal={row['causal']} {row['backend']} {row['part']}: do_bench "
          f"{row['bench_ms']:.3f} ms (1 s: {row['bench_long_ms']:.3f}), events {row['events_ms']:.3f}, kernels "
          f"{row['sum_ms']:.3f}, span {span:.3f}, host {row['host_ms']:.3f}, graph {row['graph_ms']}; 1 s run: "
          f"{row['watts_long']} W, {row['mhz_long']} MHz; clock {row['clock_after_bench']} / "
          f"{row['clock_after_long']} / {row['clock_after_profile']} MHz", flush=True)
    for kname, ms in sorted(row["kernels_ms"].items(), key=lambda x: -x[1]):
        print(f"    {ms:8.3f} ms  {kname}", flush=True)
    return row


def run(cells=CELLS) -> list[dict]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashcheck.kernels import attention

    rows = []
    for d, n, causal in cells:
        B, H = 16384 // n, 2048 // d
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
                   for _ in range(3))
        do = torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
        for name in ("ours", "cudnn"):
            if name == "ours":
                o = attention(q, k, v, causal="bottom_right" if causal else False)
            else:
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def bwd():
                torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

            def fwd():
                with torch.no_grad():
                    if name == "ours":
                        attention(q, k, v, causal="bottom_right" if causal else False)
                    else:
                        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            for part, fn in (("fwd", fwd), ("bwd", bwd)):
                rows.append(_measure(fn, {"d": d, "N": n, "causal": causal, "backend": name, "part": part}))
            del o
        del q, k, v, do
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    p.add_argument("--cells", type=int, default=len(CELLS), help="the first CELLS only")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bwd_gap: needs a CUDA GPU")
        return 0
    rows = run(CELLS[:args.cells])
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "bwd_gap.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
