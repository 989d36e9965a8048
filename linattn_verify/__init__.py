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
    "oracle": "linattn_verify.oracles.api",
    "validate_problem": "linattn_verify.semantics",
    "Problem": "linattn_verify.semantics",
    "PrecisionRecipe": "linattn_verify.recipe",
    "forward_bounds": "linattn_verify.tolerance",
    "backward_bounds": "linattn_verify.tolerance",
    "reference_gradients": "linattn_verify.tolerance",
    "TensorBound": "linattn_verify.tolerance",
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
    from linattn_verify.errors import InvalidArgument, PropertyViolation
    from linattn_verify.oracles.api import oracle
    from linattn_verify.recipe import PrecisionRecipe
    from linattn_verify.results import CaseRecord, Comparison, PropertyResult, PropertyVerdict
    from linattn_verify.running import check_property
    from linattn_verify.semantics import Problem, validate_problem
    from linattn_verify.tolerance import (
        TensorBound,
        backward_bounds,
        forward_bounds,
        reference_gradients,
    )


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
