"""Third-party entry: performer-pytorch's ``causal_linear_attention_noncuda``, unchanged.

The shim only adapts the layout and the return value: performer-pytorch takes heads-first
[B, H, T, D] tensors and returns o alone. It transposes to heads-first, calls the function
with ``eps=0`` (its eps is added to every entry of the key sum, so only eps = 0 computes the
function with a plain denominator), transposes back and returns ``(o, None)``. No casts, no
rescaling: the feature map, the scale (none), the chunking (``torch.chunk`` into 128 *pieces*,
cumsums carried across them), the dtype of the arithmetic (the input dtype: fp16 cumsums and a
fp16 reciprocal-then-multiply normalizer) are performer-pytorch's own.
"""

from __future__ import annotations

from performer_pytorch.performer_pytorch import causal_linear_attention_noncuda


def performer_causal(q, k, v):
    o = causal_linear_attention_noncuda(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), eps=0
    )
    return o.transpose(1, 2), None
