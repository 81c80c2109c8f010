"""Biases by name, shape and use (tensortap.core._roles), in each framework's layout."""

from __future__ import annotations

import numpy as np

from tensortap.core._roles import JAX_LAYOUT, TORCH_LAYOUT, bias_names, named_bias


def test_a_name_holding_bias_tells_a_vector_and_a_name_ending_in_bias_anything() -> None:
    assert named_bias("rnn.bias_hh_l0", (16,), ".")
    assert named_bias("attn.bias_k", (1, 1, 8), ".")  # one axis longer than 1
    assert named_bias("block.attn_bias", (4, 4), ".")  # as names always said
    assert not named_bias("swin.relative_position_bias_table", (169, 3), ".")
    assert not named_bias("bias_net.weight", (3, 4), ".")  # the parent's name says nothing


def test_pytorch_a_zero_vector_beside_its_modules_weight_is_a_bias() -> None:
    leaves = [
        ("lin.w", np.ones((3, 5))),  # x @ w: the output is the last axis
        ("lin.b0", np.zeros(5)),
        ("conv.kernel", np.ones((6, 3, 3, 3))),  # (out, in, kh, kw)
        ("conv.offset", np.zeros(6)),
        ("ssm.a_log", np.ones((5, 2))),
        ("ssm.d", np.ones(5)),  # a scale of ones beside a kernel: a weight
        ("norm.weight", np.zeros(5)),  # zeros, but no kernel beside it: a weight
        ("lone.b", np.zeros(5)),
    ]
    assert bias_names(leaves, TORCH_LAYOUT, initial=True) == {"lin.b0", "conv.offset"}
    assert bias_names(leaves, TORCH_LAYOUT) == set()  # values unknown: names alone


def test_jax_keeps_its_rule_a_vector_beside_a_kernel_or_zeros_at_the_start() -> None:
    leaves = [
        ("params/linear/w", np.ones((3, 5))),
        ("params/linear/b", np.ones(5)),  # beside a kernel whose last axis is as long
        ("params/b0", np.zeros(4)),  # zeros when the optimizer starts
        ("params/norm/scale", np.ones(5)),
    ]
    assert bias_names(leaves, JAX_LAYOUT) == {"params/linear/b"}
    assert bias_names(leaves, JAX_LAYOUT, initial=True) == {"params/linear/b", "params/b0"}
