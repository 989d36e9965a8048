# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""One comparison engine: a tensor against the oracle, against another run, or bit for bit.

Every function here returns a `linattn_verify.results.Comparison`, and `message.mismatch_message`
renders any of them the way torch.testing does:

* `compare` (`oracle.py`): r = |x̂ - x| / B, and η for normalized outputs, <= 2;
* `compare_pair` (`pairwise.py`): |a - b| / (B_a + B_b) <= 2 between two runs of one function;
* `compare_bitwise` (`bitwise.py`): the same bits, NaN equal to NaN.

`check_against_oracle` and `assert_linattn_close` judge a whole kernel run against the oracle.
"""

from linattn_verify.compare.bitwise import bitwise_mismatch, compare_bitwise
from linattn_verify.compare.oracle import (
    OracleJudgement,
    assert_linattn_close,
    check_against_oracle,
    compare,
    compare_within,
    judge_against_oracle,
)
from linattn_verify.compare.pairwise import Side, compare_pair
from linattn_verify.results import FAIL_THRESHOLD, Comparison
from linattn_verify.results.message import mismatch_message, summary_line

__all__ = [
    "FAIL_THRESHOLD",
    "Comparison",
    "OracleJudgement",
    "Side",
    "assert_linattn_close",
    "bitwise_mismatch",
    "check_against_oracle",
    "compare",
    "compare_bitwise",
    "compare_pair",
    "compare_within",
    "judge_against_oracle",
    "mismatch_message",
    "summary_line",
]
