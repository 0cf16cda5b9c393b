"""A-priori floating-point error bounds: the tolerances every kernel test uses (ARCHITECTURE.md,
"Error-bound API"; derivation in proofs/bounds.md).

Given the float64 values a kernel actually received and a `Precision` describing how it computes,
`forward_bound` returns elementwise bounds on |O_kernel - O| and |LSE_kernel - LSE|, and
`backward_bound` on |dQ_kernel - dQ|, |dK_kernel - dK|, |dV_kernel - dV|, where O, LSE, dQ, dK, dV
are the exact results for those inputs; `lse_gradient_bound` on |dQ_kernel - dQ| for the gradient
of sum_i w_i LSE_i alone (dO = 0).

Two kinds, named as such:
- "worst_case": never exceeded, for any rounding errors (Higham's gamma_n = n u / (1 - n u) and
  rigorous majorants for every second-order term).
- "probabilistic": the first-order error is a sum of independent, mean-zero rounding errors
  (Higham & Mary 2019 model); Azuma-Hoeffding bounds it by LAMBDA standard deviations, exceeded with
  probability <= FAILURE_PROBABILITY per entry. Errors that are not random (tensor-core truncation,
  the truncation of fp32 operands to tf32, the ex2.approx / div.full approximation error, roundings
  shared by a whole row) stay worst-case,
  and the nonlinear remainder is bounded rigorously by its majorant series (proofs/bounds.md, sec. 6).

The model of the computation is the FA2 forward/backward of kernels/triton_fwd.py and
kernels/triton_bwd.py (base-2 logits, running max, deferred normalization, P and dS converted to the
operand dtype before the tensor-core products: rounded to nearest for fp16/bf16, truncated for tf32).
"""
from __future__ import annotations

# The package is split along proofs/bounds.md: precision model, logits, forward (O, LSE), backward
# (dQ, dK, dV and the float64 references), LSE gradient. This module re-exports the public API.
from .precision import (INPUTS, DOTS, ACCUMULATORS, EXPS, KINDS, UNIT_ROUNDOFF, UNDERFLOW_FLOOR, TENSOR_CORE_DOTS,
                        TRUNCATING_DOTS, TRUNCATION_ERROR, TRUNCATION_FLOOR, FAILURE_PROBABILITY, LAMBDA,
                        ACCUMULATIONS, DELTA_SOURCES, EXP_ARGUMENTS, GQA_REDUCTIONS, TILE_ORDERS, HardwareConstants,
                        HARDWARE, BandForward, FusedDq, Precision, REFERENCE_PRECISION, gamma, hoeffding_lambda,
                        is_band)
from .results import BackwardBound, ForwardBound
from .forward import ForwardTerms, LseTerms, OTerms, forward_bound, forward_terms
from .backward import backward_bound, reference_bound
from .lse_gradient import lse_gradient_bound
from .common import _weighted_dev, _weighted_exp_err  # used by tests
from .precision import _conv, _model  # used by tests

__all__ = ['INPUTS', 'DOTS', 'ACCUMULATORS', 'EXPS', 'KINDS', 'UNIT_ROUNDOFF', 'UNDERFLOW_FLOOR', 'TENSOR_CORE_DOTS',
           'TRUNCATING_DOTS', 'TRUNCATION_ERROR', 'TRUNCATION_FLOOR', 'FAILURE_PROBABILITY', 'LAMBDA',
           'ACCUMULATIONS', 'DELTA_SOURCES', 'EXP_ARGUMENTS', 'GQA_REDUCTIONS', 'TILE_ORDERS', 'HardwareConstants',
           'HARDWARE', 'BandForward', 'FusedDq', 'Precision', 'is_band', 'REFERENCE_PRECISION', 'gamma',
           'hoeffding_lambda', 'BackwardBound', 'ForwardBound', 'forward_bound', 'forward_terms', 'ForwardTerms',
           'OTerms', 'LseTerms', 'backward_bound', 'reference_bound', 'lse_gradient_bound']
