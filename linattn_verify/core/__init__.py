# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""The family-free core: what every family plugs into (`Family`) and how families are found.

The core imports no family, no mode (``run``, ``check``, ``soak``, ``drift``), no CLI and no
property catalogue (`tests/unit/test_import_rules.py` enforces it). A family is a package that
subclasses `Family` and names it under the entry-point group `FAMILY_ENTRY_POINT_GROUP`.
"""

from linattn_verify.core.family import (
    FAMILY_ENTRY_POINT_GROUP,
    Family,
    FamilyCase,
    FamilyKernel,
    KernelSource,
    families,
    family_named,
    family_of,
    is_case,
    register_family,
    source_from_json,
)

__all__ = [
    "FAMILY_ENTRY_POINT_GROUP",
    "Family",
    "FamilyCase",
    "FamilyKernel",
    "KernelSource",
    "families",
    "family_named",
    "family_of",
    "is_case",
    "register_family",
    "source_from_json",
]
