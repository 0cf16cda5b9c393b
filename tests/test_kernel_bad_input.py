"""Bad input gets a ValueError/TypeError naming the argument (ARCHITECTURE.md); nothing is launched."""
import subprocess
import sys

import pytest
import torch

from tests.test_kernel_support import DEVICE, INTERPRET, needs_kernel


def _qkv(B=1, Hq=2, Hkv=1, nq=8, nk=8, d=16, dv=16, dtype=torch.float32):
    return (torch.randn(B, Hq, nq, d, dtype=dtype, device=DEVICE),
            torch.randn(B, Hkv, nk, d, dtype=dtype, device=DEVICE),
            torch.randn(B, Hkv, nk, dv, dtype=dtype, device=DEVICE))


def _attention():
    from flashcheck.kernels import attention
    return attention


BAD = [
    ("q must be a torch.Tensor", TypeError, lambda q, k, v: (q.numpy(force=True), k, v), {}),
    ("q must have shape", ValueError, lambda q, k, v: (q[0], k, v), {}),
    ("share one dtype", TypeError, lambda q, k, v: (q.half(), k, v), {}),
    ("k must be float16, bfloat16 or float32", TypeError, lambda q, k, v: (q, k.double(), v), {}),
    ("multiple of k/v heads", ValueError, lambda q, k, v: (q[:, :1].expand(1, 3, 8, 16), k.expand(1, 2, 8, 16), v.expand(1, 2, 8, 16)), {}),
    ("k and v must agree", ValueError, lambda q, k, v: (q, k, v[:, :, :5]), {}),
    ("head dim", ValueError, lambda q, k, v: (q, k[..., :8], v), {}),
    ("head dim d must be in 1..256", ValueError, lambda q, k, v: (q.new_zeros(1, 2, 8, 300), k.new_zeros(1, 1, 8, 300), v), {}),
    ("k batch", ValueError, lambda q, k, v: (q, k.expand(2, 1, 8, 16), v.expand(2, 1, 8, 16)), {}),
]


@needs_kernel
@pytest.mark.parametrize("match,exc,mangle,kw", BAD, ids=[b[0] for b in BAD])
def test_bad_tensors_are_refused(match, exc, mangle, kw):
    q, k, v = mangle(*_qkv())
    with pytest.raises(exc, match=match):
        _attention()(q, k, v, **kw)


BAD_KW = [
    ("causal must be", ValueError, dict(causal="bottom-right")),
    ("causal must be", ValueError, dict(causal=1)),
    ("window must be a", ValueError, dict(window=3)),
    ("window left must be", ValueError, dict(window=(-1, 0))),
    ("window right must be", ValueError, dict(window=(0, 2.5))),
    ("scale must be", TypeError, dict(scale=float("nan"))),
    ("dot_precision must be", ValueError, dict(dot_precision="fp16")),
    ("mask must be a bool", TypeError, dict(mask=torch.ones(8, 8))),
    ("does not broadcast", ValueError, dict(mask=torch.ones(3, 8, dtype=torch.bool))),
    ("does not broadcast", ValueError, dict(mask=torch.ones(1, 3, 8, 8, dtype=torch.bool))),
    ("mask must be a bool tensor, a flashcheck.kernels", TypeError, dict(mask=[[True]])),
    ("precision must be one of", ValueError, dict(precision="high")),
    ("precision='accurate' with dot_precision='tf32'", ValueError,
     dict(precision="accurate", dot_precision="tf32")),
    ("delta_from must be one of", ValueError, dict(delta_from="float64")),
    ("tiles must be a flashcheck.kernels.attention.KernelConfig", TypeError, dict(tiles=(64, 64))),
]


@needs_kernel
@pytest.mark.parametrize("match,exc,kw", BAD_KW, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD_KW)])
def test_bad_options_are_refused(match, exc, kw):
    q, k, v = _qkv()
    kw = {key: (val.to(DEVICE) if isinstance(val, torch.Tensor) else val) for key, val in kw.items()}
    with pytest.raises(exc, match=match):
        _attention()(q, k, v, **kw)


@needs_kernel
def test_block_mask_of_other_lengths_is_refused():
    from flashcheck.kernels import build_block_mask

    q, k, v = _qkv()
    bm = build_block_mask(9, 8, block_q=16, block_k=16, device=DEVICE)
    with pytest.raises(ValueError, match="mask was built for"):
        _attention()(q, k, v, mask=bm)


def test_block_sizes_must_be_tile_sizes():
    from flashcheck.kernels import build_block_mask

    with pytest.raises(ValueError, match="block_q must be a power of two"):
        build_block_mask(8, 8, block_q=24, block_k=16)


@needs_kernel
def test_oversized_sequences_are_refused_before_any_launch():
    """Offsets that would overflow the kernel's per-head int32 arithmetic: refused, never garbage.
    (Expanded views: no memory is allocated.)"""
    q = torch.zeros(1, 1, 1, 16, device=DEVICE).expand(1, 1, 2**28, 16)
    with pytest.raises(ValueError, match="exceed the kernel's int32"):
        _attention()(q, q, q)


def test_cpu_tensors_without_interpreter_are_refused():
    """Run in a fresh interpreter without TRITON_INTERPRET (the env var is read at import time)."""
    code = ("import torch\nfrom flashcheck.kernels import attention\nq=torch.randn(1,1,4,16)\n"
            "try:\n attention(q,q,q)\nexcept ValueError as e:\n print('ERR', e)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert "ERR q, k, v are CPU tensors" in out.stdout, out.stdout + out.stderr


@needs_kernel
def test_bf16_in_the_interpreter_is_refused():
    if not INTERPRET:
        pytest.skip("only the CPU interpreter lacks bf16")
    q, k, v = _qkv(dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="bfloat16 on the CPU"):
        _attention()(q, k, v)


@needs_kernel
def test_empty_sequences():
    """Nk = 0: every row is fully masked (O = 0, LSE = −inf, zero dQ); Nq = 0: empty outputs."""
    q, k, v = _qkv(nk=0)
    q.requires_grad_()
    o, lse = _attention()(q, k, v, return_lse=True)
    assert o.shape == (1, 2, 8, 16) and torch.all(o == 0) and torch.all(lse == float("-inf"))
    (dq,) = torch.autograd.grad(o.sum(), (q,))
    assert torch.all(dq == 0)
    q, k, v = _qkv(nq=0)
    o = _attention()(q, k, v)
    assert o.shape == (1, 2, 0, 16)


@needs_kernel
def test_mixed_devices_are_refused():
    if not torch.cuda.is_available():
        pytest.skip("needs a second device type")
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="one device"):
        _attention()(q.cpu() if INTERPRET is False else q, k.cuda(), v.cuda())
