"""Write docs/cli.md, orch's command reference, from the typer app's own help.

Every command and subcommand, in the order `orch --help` lists them: its usage line, its help and
each argument and option as `--help` shows them (the same help records, without the terminal's
panels). tests/unit/test_cli_reference.py fails when docs/cli.md is not what this writes.

usage: .venv/bin/python scripts/cli_reference.py            (writes docs/cli.md)
       .venv/bin/python scripts/cli_reference.py --check    (exit 1 when docs/cli.md is stale)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Iterator

import typer

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "docs" / "cli.md"
REGENERATE = ".venv/bin/python scripts/cli_reference.py"
HEADER = f"""# orch command reference

Generated from the command line's own help by `scripts/cli_reference.py`: do not edit by hand.
After changing a command, its options or their help, run `{REGENERATE}`
(tests/unit/test_cli_reference.py fails until docs/cli.md matches).
"""


def _markdown(text: str) -> str:
    """Help text (rich markup) as Markdown: [bold] as **, and what Markdown would act on escaped."""
    text = text.replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;")
    return re.sub(r"\[bold\](.*?)\[/bold\]", r"**\1**", text, flags=re.DOTALL)


def _walk(command: Any, ctx: typer.Context) -> Iterator[tuple[Any, typer.Context]]:
    """The command and every command under it, each with its context, in `--help` order."""
    yield command, ctx
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            yield from _walk(sub, typer.Context(sub, info_name=name, parent=ctx))


def _usage(command: Any, ctx: typer.Context) -> str:
    """The usage line `--help` prints, on one line whatever the terminal's width."""
    return " ".join(["Usage:", ctx.command_path, *command.collect_usage_pieces(ctx)])


def _section(command: Any, ctx: typer.Context) -> list[str]:
    depth = ctx.command_path.count(" ")
    lines = [f"{'#' * min(depth + 2, 4)} {ctx.command_path}", "", "```", _usage(command, ctx), "```", ""]
    if command.help:
        lines += [_markdown(command.help), ""]
    for kind, title in (("argument", "Arguments"), ("option", "Options")):
        records = [param.get_help_record(ctx) for param in command.params
                   if param.param_type_name == kind and not getattr(param, "hidden", False)]
        if records:
            lines += [f"{title}:", ""]
            lines += [f"- `{names}`: {_markdown(help_text)}".rstrip() for names, help_text in records if names]
            lines.append("")
    if hasattr(command, "list_commands"):
        lines += ["Commands: " + ", ".join(f"`{name}`" for name in command.list_commands(ctx)), ""]
    return lines


def render() -> str:
    """docs/cli.md as it should be now."""
    from orchestrator.cli.app import app

    root = typer.main.get_command(app)
    lines = [HEADER]
    for command, ctx in _walk(root, typer.Context(root, info_name="orch")):
        lines += _section(command, ctx)
    return "\n".join(lines).rstrip("\n") + "\n"


def stale(path: Path = REFERENCE) -> str | None:
    """Why ``path`` is not the current reference (None when it is)."""
    if not path.exists():
        return f"{path} does not exist: write it with {REGENERATE}"
    if path.read_text() != render():
        return f"{path} is stale (the command line's help changed): regenerate it with {REGENERATE}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write (or --check) orch's command reference, docs/cli.md.")
    parser.add_argument("--check", action="store_true", help="Exit 1 when the file is stale; write nothing.")
    parser.add_argument("--output", type=Path, default=REFERENCE, help="The file (default: docs/cli.md).")
    args = parser.parse_args(argv)
    if args.check:
        why = stale(args.output)
        print(why or f"{args.output} is current", file=sys.stderr if why else sys.stdout)
        return 1 if why else 0
    args.output.write_text(render())
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
