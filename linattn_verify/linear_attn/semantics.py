# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The function being verified, stated once, and the validation of a problem instance.

Per batch row b, head h and token t = 1..T, with feature map φ, scale s (default K^-1/2) and
natural-log decay g_t <= 0 (a_t = exp(g_t); no decay means a_t = 1):

    S_t = a_t S_{t-1} + φ(k_t) v_t^T          S_t in R^{K x V}, S_0 = initial state or 0
    z_t = a_t z_{t-1} + φ(k_t)                z_t in R^K,       z_0 = initial key sum or 0
    unnormalized:  o_t = s φ(q_t)^T S_t
    normalized:    o_t = s φ(q_t)^T S_t / (s φ(q_t)^T z_t + eps)
                   (``clamp``: / max(s φ(q_t)^T z_t, eps), linear-attention-transformer's)

Equivalently (the parallel form) o_t = s Σ_{j<=t} exp(G_t - G_j) (φ(q_t)·φ(k_j)) v_j
+ s exp(G_t) φ(q_t)^T S_0, with G_t = Σ_{s<=t} g_s.

With a lifted feature map (``taylor2``, ``rebased``, ``favor+``:
`linattn_verify.linear_attn.feature_maps`) φ takes R^K to R^F and everything above holds with F for
K: S_t is F x V, z_t and z_0 have F entries. ``taylor2`` and ``rebased`` are polynomials of the
score, κ(x) = 1 + x + x²/2 and x², and Based and ReBased put the scale inside them: their weight is
κ(s q_t·k_j) = φ(s q_t)·φ(k_j), so for these two maps s multiplies q before φ and no scale
multiplies the result (`Problem.outer_scale` is 1). ``favor+`` takes its projection W ``[m, K]``
from the problem (``feature_weights``) and keeps the scale outside. A vector gate decays key
dimensions, which a lifted map no longer has: the two do not combine.

Queries may take their own map (``query_feature_map``): "efficient attention" (performer-pytorch's
``no_projection``, linear-attention-transformer) applies a softmax over the features of each query
and exp to each key. Both maps then keep K features (elementwise maps or softmax), and φ(q) below
reads as φ_q(q).

For ``favor+`` with ``normalize`` and eps = 0 the output is unchanged when every query's features
are multiplied by one positive factor, so the oracles and bounds use the stabilised query
features exp(W q - |q|²/2 - c_t)/√m with c_t = max_f (W q_t - |q_t|²/2)_f: the same o exactly,
and a denominator that does not underflow where the plain features of a large query do (a kernel
that evaluates them plainly loses the row there, as an fp32 exp(G_i)/exp(G_j) loses a steep gate).
With eps > 0, or unnormalized, no such factor cancels and φ is evaluated as written.

A vector gate (GLA style) g ``[B, T, H, K]`` decays each key dimension m on its own:
S_t = diag(exp(g_t)) S_{t-1} + φ(k_t) v_t^T and z_t = exp(g_t) ⊙ z_{t-1} + φ(k_t), so that
o_t = s Σ_{j<=t} Σ_m φ(q_t)_m φ(k_j)_m exp(G_tm - G_jm) v_j + s (exp(G_t) ⊙ φ(q_t))^T S_0. A
scalar gate is the vector gate repeated over the K dimensions.

Conventions fixed here, which every oracle and our kernels share:

* eps is part of the function and is used exactly as given. A kernel that adds eps in float32
  computes with fl32(eps); the harness passes that rounded value to the oracle (see
  `linattn_verify.linear_attn.recipe.PrecisionRecipe.effective_eps`).
* A normalized row whose denominator s φ(q_t)^T z_t + eps is exactly zero returns 0. With
  φ >= 0 and eps = 0 this is the row whose every feature product vanishes (its numerator is
  then exactly zero too), the 0/0 case; the exact result is defined to be 0 there. (That is the
  oracles' and our kernels' choice; the exact quotient is undefined there, and a kernel under
  test declares its own, `linattn_verify.linear_attn.kernel.Capabilities.zero_denominator`.) A
  computation in a given precision treats a denominator below that format's smallest normal
  number as zero too (`linattn_verify.linear_attn.feature_maps.vanishes`): its reciprocal would
  overflow, and no rounding analysis can certify such a row (it is *unverifiable* in the error
  model).
* The final state is S_T (and z_T when normalized), per sequence.
* With ``cu_seqlens`` (int, ``[N+1]``, B == 1) the T axis packs N sequences; the state restarts
  at every boundary and ``initial_state`` has N rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, cast, get_args

import torch

from linattn_verify.core.tokens import (
    FLOAT_DTYPES,
    PackedTokens,
    check_cu_seqlens,
    check_flag,
    check_real,
    check_tensor,
)
from linattn_verify.errors import InvalidArgument
from linattn_verify.linear_attn.feature_maps import apply_feature_map, favor_exponent, feature_dim
from linattn_verify.typing import KEEPS_K, LIFTED_MAPS, SCORE_MAPS, FeatureMap, dtype_name

OMITTABLE = (
    "g",
    "scale",
    "normalize",
    "eps",
    "feature_map",
    "initial_state",
    "output_final_state",
    "cu_seqlens",
)
"""The arguments a caller may leave out of a kernel call (docs/design.md §4), each then taking its
documented default: no decay, K^-1/2, unnormalized, eps = 0, the identity feature map, a zero
initial state, no final state, one dense sequence per batch row (`validate_problem`'s defaults).
"""


@dataclass(frozen=True)
class Problem(PackedTokens):
    """A validated instance of the function: inputs plus every option resolved.

    Attributes:
        q: Queries ``[B, T, H, K]`` (before the feature map).
        k: Keys ``[B, T, H, K]`` (before the feature map).
        v: Values ``[B, T, H, V]``.
        g: Natural-log decay ``[B, T, H]`` (scalar gate) or ``[B, T, H, K]`` (vector gate, one
            per key dimension), every entry finite and <= 0, or `None` (no decay).
        scale: The resolved scale s (K^-1/2 when the caller passed `None`).
        normalize: Whether the output is divided by s φ(q_t)^T z_t + eps.
        eps: The denominator offset (0.0 when unnormalized).
        feature_map: The feature map φ.
        initial_state: S_0 ``[N, H, K, V]`` or `None` (zeros).
        initial_key_sum: z_0 ``[N, H, K]`` (normalized problems only) or `None` (zeros).
        output_final_state: Whether the final state is part of the result.
        cu_seqlens: Sequence boundaries ``[N+1]`` (int64, CPU) or `None`.
        feature_weights: The projection W ``[m, K]`` of ``favor+`` (`None` for every other map).
        query_feature_map: The queries' own map where it differs from ``feature_map`` (then
            the keys'), or `None`: one map for both. Default: `None`.
        clamp: The denominator is max(s φ(q_t)^T z_t, eps) rather than s φ(q_t)^T z_t + eps
            (set from the recipe's ``normalizer`` by
            `linattn_verify.linear_attn.tolerance.as_kernel_sees`). Default: `False`.
        key_sum_offset: What the initial key sum carries beyond the kernel's own: eps, where
            `linattn_verify.linear_attn.tolerance.as_kernel_sees` moved a kernel's eps inside
            the dot into z_0 (the kernel's returned z_T lacks it). Default: `0.0`.
        gv: A value gate ``[B, T, H, V]`` (natural log, finite, <= 0; FLA's ``gv`` of GLA), or
            `None`: the state decays as S_t = diag(exp(g_t)) S_{t-1} diag(exp(gv_t)) before
            k_t v_t^T is added; unnormalized problems only (z has no value columns to gate).
            Judged as H·V single-column problems (`linattn_verify.linear_attn.value_gate`).
            Default: `None`.
        gate_factors: The exponentials that form each step's decay: 1, or 2 on a problem whose
            g is a folded g + gv (the kernel decays by exp(g) and exp(gv) apart), where each
            decay weight's rounding is charged per factor (`SequenceTerms.weight_error`).
            Default: `1`.
        omit: Arguments (`OMITTABLE`) a kernel call leaves out where their value is the
            default (`at_default`), to exercise the kernel's own defaults. How the kernel is
            called, not what it computes: the oracles ignore it. Default: none (every argument
            passed explicitly).
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor | None
    scale: float
    normalize: bool
    eps: float
    feature_map: FeatureMap
    initial_state: torch.Tensor | None
    initial_key_sum: torch.Tensor | None
    output_final_state: bool
    cu_seqlens: torch.Tensor | None
    omit: frozenset[str] = frozenset()
    feature_weights: torch.Tensor | None = None
    query_feature_map: FeatureMap | None = None
    clamp: bool = False
    key_sum_offset: float = 0.0
    gv: torch.Tensor | None = None
    gate_factors: int = 1

    family = "linear_attn"

    def denominator(self, Z: torch.Tensor) -> torch.Tensor:
        """The normalizer from Z = s φ(q_t)^T z_t: Z + eps, or max(Z, eps) (``clamp``)."""
        return torch.clamp(Z, min=self.eps) if self.clamp else Z + self.eps

    @property
    def query_map(self) -> FeatureMap:
        """The map applied to queries (``query_feature_map``, else ``feature_map``)."""
        return self.query_feature_map or self.feature_map

    def map_of(self, *, query: bool) -> FeatureMap:
        """The map of queries (``query``) or keys."""
        return self.query_map if query else self.feature_map

    @property
    def lifted(self) -> bool:
        """Whether a side's map is lifted (not elementwise: `linattn_verify.typing.LIFTED_MAPS`)."""
        return self.feature_map in LIFTED_MAPS or self.query_map in LIFTED_MAPS

    @property
    def feature_dim(self) -> int:
        """F: the rows of the state (K for an elementwise map)."""
        W = self.feature_weights
        return feature_dim(self.feature_map, self.q.shape[-1], 0 if W is None else W.shape[0])

    @property
    def outer_scale(self) -> float:
        """The scale that multiplies φ(q)·φ(k): 1 for the score maps, whose scale multiplies q."""
        return 1.0 if self.feature_map in SCORE_MAPS else self.scale

    @property
    def query_prescale(self) -> float:
        """The factor a query is multiplied by before φ: s for the score maps, else 1."""
        return self.scale if self.feature_map in SCORE_MAPS else 1.0

    @property
    def stabilised_queries(self) -> bool:
        """Whether the queries' favor+ features carry the factor exp(-max_f y_f) (module doc)."""
        return self.feature_map == "favor+" and self.normalize and self.eps == 0.0

    def query_features(self, q: torch.Tensor) -> torch.Tensor:
        """φ of queries ``[..., K]`` taken from this problem, in their dtype ``[..., F]``."""
        if self.feature_map in SCORE_MAPS:
            return apply_feature_map(q * self.query_prescale, self.feature_map)
        if self.stabilised_queries:
            assert self.feature_weights is not None
            y = favor_exponent(q, self.feature_weights)
            c = y.amax(-1, keepdim=True) if y.shape[-1] else y.sum(-1, keepdim=True)
            return torch.exp(y - c) / math.sqrt(self.feature_weights.shape[0])
        return apply_feature_map(q, self.query_map, self.feature_weights)

    def key_features(self, k: torch.Tensor) -> torch.Tensor:
        """φ of keys ``[..., K]`` taken from this problem, in their dtype ``[..., F]``."""
        return apply_feature_map(k, self.feature_map, self.feature_weights)

    def at_default(self) -> frozenset[str]:
        """Return the arguments (of `OMITTABLE`) whose value is the calling convention's default.

        The scale is at its default when it equals K^-1/2 exactly (as `validate_problem`
        resolves ``scale=None``).
        """
        defaults = {
            "g": self.g is None,
            "scale": self.scale == self.q.shape[-1] ** -0.5,
            "normalize": not self.normalize,
            "eps": self.eps == 0.0,
            "feature_map": self.feature_map == "identity",
            "initial_state": self.initial_state is None,
            "output_final_state": not self.output_final_state,
            "cu_seqlens": self.cu_seqlens is None,
        }
        return frozenset(name for name, default in defaults.items() if default)

    def describe(self) -> str:
        """Return a one-line description: shapes, dtype and every option."""
        B, T, H, K, V = self.shape
        fmap = f"feature_map={self.feature_map}"
        if self.query_feature_map is not None:
            fmap += f" (queries: {self.query_feature_map})"
        if self.feature_weights is not None:
            fmap += f" (W [{self.feature_weights.shape[0]}, {K}])"
        parts = [
            f"B={B} T={T} H={H} K={K} V={V}",
            dtype_name(self.q.dtype),
            fmap,
            f"scale={self.scale:.6g}",
        ]
        if self.normalize:
            parts.append(f"normalize eps={self.eps:.6g}")
        if self.g is not None:
            gate = "vector decay g[B,T,H,K]" if self.vector_gate else "decay g"
            parts.append(f"{gate} in [{float(self.g.min()):.3g}, {float(self.g.max()):.3g}]")
        if self.gv is not None:
            parts.append(
                f"value gate gv in [{float(self.gv.min()):.3g}, {float(self.gv.max()):.3g}]"
            )
        if self.initial_state is not None:
            parts.append("initial_state")
        if self.output_final_state:
            parts.append("final_state")
        if self.cu_seqlens is not None:
            parts.append(f"cu_seqlens={self.cu_seqlens.tolist()}")
        if omitted := [n for n in OMITTABLE if n in self.omit & self.at_default()]:
            parts.append(f"called without {','.join(omitted)}")
        return " ".join(parts)

    def inputs(self) -> dict[str, torch.Tensor]:
        """Return the differentiable inputs that exist, by name (``q`` ... ``initial_key_sum``).

        ``gv`` among them, so every property that transforms the inputs (a layout, a
        permutation of heads) transforms it alike; its gradient is not judged.
        """
        named = {
            "q": self.q,
            "k": self.k,
            "v": self.v,
            "g": self.g,
            "gv": self.gv,
            "initial_state": self.initial_state,
            "initial_key_sum": self.initial_key_sum,
        }
        return {name: t for name, t in named.items() if t is not None}

    @property
    def state_arg(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None:
        """The initial state as the calling convention passes it: S_0, (S_0, z_0), or `None`."""
        if self.initial_state is None:
            return None
        if self.normalize:
            assert self.initial_key_sum is not None
            return (self.initial_state, self.initial_key_sum)
        return self.initial_state

    def with_tensors(self, **changes: torch.Tensor | None) -> Problem:
        """Return the same problem with some tensors replaced (``q=..., initial_state=...``).

        The options stay as they are; only tensor fields can change, and the result is not
        re-validated: the caller keeps shapes consistent (a changed ``cu_seqlens`` with
        matching tensors, say).

        Raises:
            InvalidArgument: naming a field that is not a tensor of the problem.
        """
        tensors = {
            "q",
            "k",
            "v",
            "g",
            "initial_state",
            "initial_key_sum",
            "cu_seqlens",
            "feature_weights",
            "gv",
        }
        unknown = sorted(set(changes) - tensors)
        if unknown:
            raise _fail(
                f"Got {unknown}, but with_tensors changes only the tensors {sorted(tensors)}."
            )
        return replace(self, **changes)  # type: ignore[arg-type]

    def with_grad_leaves(self) -> tuple[Problem, dict[str, torch.Tensor]]:
        """Return a copy whose inputs are fresh autograd leaves, and those leaves by name."""
        leaves = {n: t.detach().clone().requires_grad_(True) for n, t in self.inputs().items()}
        return self.with_tensors(**leaves), leaves


def _fail(message: str) -> InvalidArgument:
    return InvalidArgument(message)


def check_feature_map(feature_map: Any) -> FeatureMap:
    """Return ``feature_map`` if it names a supported feature map, else raise InvalidArgument."""
    choices = get_args(FeatureMap)
    if feature_map not in choices:
        raise _fail(f"Got feature_map={feature_map!r}, but feature_map must be one of {choices}.")
    return cast(FeatureMap, feature_map)


def validate_problem(
    q: Any,
    k: Any,
    v: Any,
    g: Any = None,
    *,
    scale: Any = None,
    normalize: Any = False,
    eps: Any = 0.0,
    feature_map: Any = "identity",
    initial_state: Any = None,
    output_final_state: Any = False,
    cu_seqlens: Any = None,
    feature_weights: Any = None,
    query_feature_map: Any = None,
    gv: Any = None,
) -> Problem:
    """Check one instance of the function and resolve its options.

    Args:
        q: Queries ``[B, T, H, K]``.
        k: Keys ``[B, T, H, K]``.
        v: Values ``[B, T, H, V]``.
        g: Natural-log decay, finite and <= 0: ``[B, T, H]`` (one per token and head) or
            ``[B, T, H, K]`` (a vector gate, one per key dimension). Default: `None`.
        scale: Scale applied to φ(q); `None` means K^-1/2. Default: `None`.
        normalize: Divide by s φ(q_t)^T z_t + eps. Default: `False`.
        eps: Denominator offset, >= 0; must be 0 when ``normalize`` is false. Default: `0.0`.
        feature_map: ``"identity"``, ``"elu1"``, ``"relu"``, or a lifted map ``"taylor2"``,
            ``"rebased"``, ``"favor+"``. Default: `"identity"`.
        initial_state: S_0 ``[N, H, F, V]``, or for normalized problems the pair
            ``(S_0, z_0)`` with z_0 ``[N, H, F]`` (F = K for an elementwise map). Default: `None`.
        output_final_state: Return S_T (and z_T). Default: `False`.
        cu_seqlens: Packed-sequence boundaries ``[N+1]``, needs B == 1. Default: `None`.
        feature_weights: The projection W ``[m, K]`` (m >= 1) of ``favor+``, a finite float
            tensor on q's device; required by ``favor+`` and refused by every other map.
            Default: `None`.
        query_feature_map: The queries' own map, or `None` for ``feature_map`` on both. Where
            it differs, both maps must keep K features (`KEEPS_K`). Default: `None`.
        gv: A value gate ``[B, T, H, V]``, finite and <= 0, on q's device; unnormalized
            problems only. Default: `None`.

    Returns:
        The validated `Problem`.

    Raises:
        InvalidArgument: naming the first argument that is malformed and what was expected.
    """
    q = check_tensor("q", q, 4, "[B, T, H, K]")
    B, T, H, K = q.shape
    k = check_tensor("k", k, 4, "[B, T, H, K]")
    v = check_tensor("v", v, 4, "[B, T, H, V]")
    if k.shape != q.shape:
        raise _fail(f"Expected k of shape {tuple(q.shape)} (as q) but got {tuple(k.shape)}.")
    if v.shape[:3] != q.shape[:3]:
        raise _fail(
            f"Expected v of shape [B={B}, T={T}, H={H}, V] (as q) but got {tuple(v.shape)}."
        )
    if min(B, T, H, K, v.shape[-1]) < 1:
        raise _fail(f"Expected B, T, H, K, V >= 1 but got q {tuple(q.shape)}, v {tuple(v.shape)}.")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise _fail(f"Expected q, k, v of one dtype but got {q.dtype}, {k.dtype}, {v.dtype}.")
    if k.device != q.device or v.device != q.device:
        raise _fail(f"Expected q, k, v on one device but got {q.device}, {k.device}, {v.device}.")
    if g is not None:
        layout = "[B, T, H] or [B, T, H, K]"
        g = check_tensor("g", g, 4 if getattr(g, "ndim", None) == 4 else 3, layout)
        if g.shape not in (q.shape[:3], q.shape):
            raise _fail(
                f"Expected g of shape {layout} = {tuple(q.shape[:3])} or {tuple(q.shape)} "
                f"but got {tuple(g.shape)}."
            )
        if g.device != q.device:
            raise _fail(f"Expected g on {q.device} (as q) but got {g.device}.")
        if bool((g > 0).any()):
            raise _fail(f"Expected g <= 0 (a log decay) but got max(g)={float(g.max()):.6g}.")
    resolved_scale = K**-0.5 if scale is None else check_real("scale", scale)
    normalize = check_flag("normalize", normalize)
    resolved_eps = check_real("eps", eps)
    if resolved_eps < 0:
        raise _fail(f"Got eps={eps!r}, but eps must be >= 0.")
    if resolved_eps != 0 and not normalize:
        raise _fail(f"Got eps={eps!r} with normalize=False; eps only applies to normalized output.")
    fmap = check_feature_map(feature_map)
    qmap = None if query_feature_map is None else check_feature_map(query_feature_map)
    if qmap == fmap:
        qmap = None
    if qmap is not None and not (qmap in KEEPS_K and fmap in KEEPS_K):
        raise _fail(
            f"Got query_feature_map={qmap!r} with feature_map={fmap!r}; queries take a map of "
            f"their own only where both keep K features: {KEEPS_K}."
        )
    W = _check_feature_weights(feature_weights, fmap, K, q.device)
    lifted = [m for m in (fmap, qmap) if m in LIFTED_MAPS]
    if lifted and g is not None and g.ndim == 4:
        raise _fail(
            f"Got feature_map={lifted[0]!r} with a vector gate g {tuple(g.shape)}; a vector gate "
            "decays key dimensions one by one, and a map that is not elementwise (lifted: "
            f"{LIFTED_MAPS}) mixes them: use a scalar gate [B, T, H]."
        )
    output_final_state = check_flag("output_final_state", output_final_state)
    bounds = None if cu_seqlens is None else check_cu_seqlens(cu_seqlens, B, T)
    N = B if bounds is None else bounds.numel() - 1
    F = feature_dim(fmap, K, 0 if W is None else W.shape[0])
    S0, z0 = _check_initial_state(initial_state, normalize, N, H, F, v.shape[-1], q.device)
    gv = _check_value_gate(gv, v, normalize)
    return Problem(
        q=q,
        k=k,
        v=v,
        g=g,
        scale=resolved_scale,
        normalize=normalize,
        eps=resolved_eps,
        feature_map=fmap,
        initial_state=S0,
        initial_key_sum=z0,
        output_final_state=output_final_state,
        cu_seqlens=bounds,
        feature_weights=W,
        query_feature_map=qmap,
        gv=gv,
    )


def _check_value_gate(gv: Any, v: torch.Tensor, normalize: bool) -> torch.Tensor | None:
    """Return the value gate ``[B, T, H, V]`` (or `None`), else raise naming ``gv``."""
    if gv is None:
        return None
    gate = check_tensor("gv", gv, 4, "[B, T, H, V]")
    if gate.shape != v.shape:
        raise _fail(
            f"Expected gv of shape [B, T, H, V] = {tuple(v.shape)} but got {tuple(gate.shape)}."
        )
    if gate.device != v.device:
        raise _fail(f"Expected gv on {v.device} (as v) but got {gate.device}.")
    if bool((gate > 0).any()):
        raise _fail(f"Expected gv <= 0 (a log decay) but got max(gv)={float(gate.max()):.6g}.")
    if normalize:
        raise _fail(
            "Got gv with normalize=True; a value gate decays the state's value columns, and "
            "the key sum z has none: value gates are for unnormalized problems."
        )
    return gate


def _check_feature_weights(
    weights: Any, feature_map: FeatureMap, K: int, device: torch.device
) -> torch.Tensor | None:
    """Return W ``[m, K]`` for favor+ (required) and `None` for every other map (refused)."""
    if feature_map != "favor+":
        if weights is not None:
            raise _fail(
                f"Got feature_weights with feature_map={feature_map!r}; only 'favor+' takes a "
                "projection W."
            )
        return None
    if weights is None:
        raise _fail("feature_map='favor+' needs feature_weights: the projection W [m, K].")
    W = check_tensor("feature_weights", weights, 2, "[m, K]")
    if W.shape[1] != K or W.shape[0] < 1:
        raise _fail(f"Expected feature_weights of shape [m >= 1, K={K}] but got {tuple(W.shape)}.")
    if W.device != device:
        raise _fail(f"Expected feature_weights on {device} (as q) but got {W.device}.")
    return W


def _check_initial_state(
    initial_state: Any, normalize: bool, N: int, H: int, K: int, V: int, device: torch.device
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if initial_state is None:
        return None, None
    if normalize:
        if not (isinstance(initial_state, tuple | list) and len(initial_state) == 2):
            raise _fail(
                "Expected initial_state to be a pair (S [N, H, K, V], z [N, H, K]) for a "
                f"normalized problem but got {type(initial_state).__name__}."
            )
        S0 = check_tensor("initial_state[0]", initial_state[0], 4, "[N, H, K, V]")
        z0 = check_tensor("initial_state[1]", initial_state[1], 3, "[N, H, K]")
        if tuple(z0.shape) != (N, H, K):
            raise _fail(
                f"Expected initial_state[1] of shape {(N, H, K)} but got {tuple(z0.shape)}."
            )
        name = "initial_state[0]"
    else:
        if isinstance(initial_state, tuple | list):
            raise _fail(
                "Expected initial_state to be one tensor [N, H, K, V] for an unnormalized "
                "problem but got a pair; (S, z) pairs belong to normalize=True."
            )
        S0 = check_tensor("initial_state", initial_state, 4, "[N, H, K, V]")
        z0 = None
        name = "initial_state"
    if tuple(S0.shape) != (N, H, K, V):
        raise _fail(f"Expected {name} of shape {(N, H, K, V)} but got {tuple(S0.shape)}.")
    for t in (S0, z0):
        if t is not None and t.device != device:
            raise _fail(f"Expected {name} on {device} (as q) but got {t.device}.")
    return S0, z0


__all__ = [
    "FLOAT_DTYPES",
    "OMITTABLE",
    "PackedTokens",
    "Problem",
    "check_cu_seqlens",
    "check_feature_map",
    "check_flag",
    "check_real",
    "check_tensor",
    "validate_problem",
]
