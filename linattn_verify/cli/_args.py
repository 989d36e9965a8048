# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""Argument types and exit codes shared by the subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT): 128 + the signal's number, as shells report it."""

DEFAULT_FAMILY = "linear_attn"


def family_in(argv: Sequence[str]) -> str:
    """The family a command line names with ``--family`` (`DEFAULT_FAMILY` without one).

    Read before the parser is built, since each family adds its own flags to it. A name that
    is no family is returned as it is, for ``--family``'s choices to reject.
    """
    scan = argparse.ArgumentParser(add_help=False)
    scan.add_argument("--family", default=DEFAULT_FAMILY)
    known, _ = scan.parse_known_args(list(argv))
    return str(known.family)


def foreign_flags(argv: Sequence[str], family: str) -> list[str]:
    """Flags in ``argv`` that belong to a family other than ``family``, each naming its owner.

    argparse would call them unrecognized; this says whose they are.
    """
    from linattn_verify.core.family import families

    def flags_of(name: str) -> set[str]:
        scratch = argparse.ArgumentParser(add_help=False)
        families()[name].add_flags(scratch)
        return {opt for action in scratch._actions for opt in action.option_strings}

    known = families()
    own = flags_of(family) if family in known else set()
    given = {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}
    found = []
    for other in sorted(known):
        if other != family:
            found += [
                f"{flag} (--family {other})" for flag in sorted(given & flags_of(other) - own)
            ]
    return found
