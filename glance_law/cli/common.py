"""What every ``python -m glance_law.*`` command shares: the parser that turns a usage mistake
into one line, the error handler (one line on stderr, exit 2, no traceback), the option types,
and the section options declared once by their statistic module (``add_cli_arguments``) and
used by both ``fit`` and ``report``.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Collection

from glance_law.errors import GlanceError
from glance_law.scrub import scrubbed_output

__all__ = ["UsageError", "Parser", "run_main", "one_line", "names", "add_section_options",
           "deprecated_alias", "add_declare_arguments", "horizon_of", "chain_of"]


class UsageError(GlanceError):
    """A command-line mistake."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``main`` prints it and exits 2)."""

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        """Options and input paths in any order: ``fit A --horizon sps=21 B`` reads B as a path (plain
        argparse stops the positional list at the first option and refuses B)."""
        try:
            return self.parse_intermixed_args(args, namespace)
        except TypeError:             # a parser feature intermixing does not support: the plain parse
            return super().parse_args(args, namespace)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def run_main(prog: str, body: Callable[[], int | None], argv: Collection[str] = ()) -> int:
    """Run a command's body: a GlanceError (bad input, usage) is one line on stderr and exit 2;
    Ctrl-C is exit 130; anything else is a bug and keeps its traceback. Everything the command
    prints goes through the scrubber, with the secrets of ``argv`` (and ``sys.argv``) remembered."""
    with scrubbed_output([*sys.argv[1:], *argv]):
        try:
            return int(body() or 0)
        except GlanceError as exc:
            print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # pragma: no cover - interactive
            print(f"{prog}: interrupted", file=sys.stderr)
            return 130


def names(text: str) -> list[str]:
    """``"a, b"`` -> ["a", "b"]."""
    return [x.strip() for x in str(text).split(",") if x.strip()]


class _Deprecated(argparse.Action):
    """A hidden old spelling: stores into the new option's destination(s)."""

    def __init__(self, option_strings, dest, targets=(), type=None, **kwargs):  # noqa: A002 - argparse's name
        self.targets = tuple(targets)
        super().__init__(option_strings, dest, type=type, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                         **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        for t in self.targets:
            setattr(namespace, t, values)


def deprecated_alias(parser_or_group, old: str, *targets: str, **kwargs) -> None:
    """Accept ``old`` (hidden from --help) as a spelling of the options stored in ``targets``."""
    parser_or_group.add_argument(old, action=_Deprecated, dest=targets[0], targets=targets, **kwargs)


class _Only:
    """A parser stand-in that keeps only the options whose destination is in ``only``."""

    def __init__(self, parser, only: Collection[str]):
        self._parser, self._only, self._groups = parser, set(only), {}

    def add_argument_group(self, title=None, description=None):
        return _OnlyGroup(self, title, description)

    def add_argument(self, *flags, **kwargs):
        return _OnlyGroup(self, None, None).add_argument(*flags, **kwargs)


class _OnlyGroup:
    def __init__(self, owner: _Only, title, description):
        self._owner, self._title, self._description, self._group = owner, title, description, None

    def add_argument(self, *flags, **kwargs):
        dest = kwargs.get("dest") or flags[0].lstrip("-").replace("-", "_")
        if dest not in self._owner._only:
            return None
        if self._group is None:
            p = self._owner._parser
            self._group = p.add_argument_group(self._title, self._description) if self._title else p
        return self._group.add_argument(*flags, **kwargs)


def add_section_options(parser: argparse.ArgumentParser, module, only: Collection[str] | None = None) -> None:
    """Add a statistic module's section options (its ``add_cli_arguments``) to ``parser``; with
    ``only``, just the options stored under those destinations (the ones a command uses)."""
    add = getattr(module, "add_cli_arguments", None)
    if add is None:
        return
    add(parser if only is None else _Only(parser, only))


def add_declare_arguments(parser) -> None:
    """``--horizon L|KEY=L`` and ``--chain [DRAFTER]`` (repeatable): declare what the method table
    cannot know (the drafted depth; that a drafter drafted one top-1 chain), applied when the logs
    are read and recorded in the notes (:mod:`glance_law.data.declare`)."""
    from glance_law.data.declare import add_declare_arguments as add
    add(parser)


def horizon_of(args):
    """The parsed ``--horizon`` values (None when not given)."""
    from glance_law.data.declare import horizon_of as parsed
    return parsed(args)


def chain_of(args):
    """The ``--chain`` declarations (None when not given)."""
    from glance_law.data.declare import chain_of as parsed
    return parsed(args)
