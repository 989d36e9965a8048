# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""linattn-verify: verify linear-attention kernels against high-precision oracles.

The public API. Names are imported lazily so that loading the pytest plugin (which imports this
package) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "oracle": "linattn_verify.linear_attn.oracles.api",
    "validate_problem": "linattn_verify.linear_attn.semantics",
    "Problem": "linattn_verify.linear_attn.semantics",
    "PrecisionRecipe": "linattn_verify.linear_attn.recipe",
    "forward_bounds": "linattn_verify.linear_attn.tolerance",
    "backward_bounds": "linattn_verify.linear_attn.tolerance",
    "reference_gradients": "linattn_verify.linear_attn.exact_gradients",
    "TensorBound": "linattn_verify.linear_attn.tolerance",
    "compare": "linattn_verify.compare",
    "check_against_oracle": "linattn_verify.compare",
    "assert_linattn_close": "linattn_verify.compare",
    "Comparison": "linattn_verify.results",
    "PropertyResult": "linattn_verify.results",
    "CaseRecord": "linattn_verify.results",
    "PropertyVerdict": "linattn_verify.results",
    "check_property": "linattn_verify.running",
    "InvalidArgument": "linattn_verify.errors",
    "PropertyViolation": "linattn_verify.errors",
}

if TYPE_CHECKING:
    from linattn_verify.compare import (
        assert_linattn_close,
        check_against_oracle,
        compare,
    )
    from linattn_verify.core.bound import TensorBound
    from linattn_verify.errors import InvalidArgument, PropertyViolation
    from linattn_verify.linear_attn.exact_gradients import reference_gradients
    from linattn_verify.linear_attn.oracles.api import oracle
    from linattn_verify.linear_attn.recipe import PrecisionRecipe
    from linattn_verify.linear_attn.semantics import Problem, validate_problem
    from linattn_verify.linear_attn.tolerance import backward_bounds, forward_bounds
    from linattn_verify.results import CaseRecord, Comparison, PropertyResult, PropertyVerdict
    from linattn_verify.running import check_property


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'linattn_verify' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "CaseRecord",
    "Comparison",
    "InvalidArgument",
    "PrecisionRecipe",
    "Problem",
    "PropertyResult",
    "PropertyVerdict",
    "PropertyViolation",
    "TensorBound",
    "__version__",
    "assert_linattn_close",
    "backward_bounds",
    "check_against_oracle",
    "check_property",
    "compare",
    "forward_bounds",
    "oracle",
    "reference_gradients",
    "validate_problem",
]
