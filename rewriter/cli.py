"""The ``stackpart`` command line: argument parsing only; each command calls one function.

Exit codes follow ruff and black: 0 clean / done, 1 changes pending or findings, 2 usage or input
error (a :class:`~rewriter.errors.StackpartError`, printed as ``path:line:col: message``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from . import __version__
from .errors import StackpartError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stackpart")
def cli() -> None:
    """Measure which performance ceiling binds in a PyTorch model and rewrite its source with the
    one mechanism that attacks it: diagnose -> plan.yaml -> rewrite -> validate -> apply."""


@cli.command()
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False), help="plan.yaml to apply.")
@click.argument("src", type=click.Path(file_okay=False))
@click.option("--apply", is_flag=True, help="Write the changes (atomically) instead of printing the diff.")
@click.option("--check", is_flag=True, help="Exit 1 when the tree differs from what the plan asks (pre-commit).")
@click.option("--unsafe", is_flag=True, help="Also write unsafe actions (bucket, kernel): they change what runs.")
@click.pass_context
def rewrite(ctx: click.Context, plan_path: str, src: str, apply: bool, check: bool, unsafe: bool) -> None:
    """Rewrite SRC as the plan asks: print a git-style diff (paths relative to SRC)."""
    from .rewrite import rewrite_command

    if apply and check:
        raise click.UsageError("--apply and --check exclude each other")
    ctx.exit(rewrite_command(plan_path, src, apply=apply, check=check, unsafe=unsafe))


@cli.group()
def plan() -> None:
    """Work with plan files."""


@plan.command("schema")
def plan_schema() -> None:
    """Print the JSON Schema of plan.yaml (version 1)."""
    from .plan import json_schema

    click.echo(json_schema())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (tests call this directly, no subprocess)."""
    try:
        result = cli.main(args=list(argv) if argv is not None else None, prog_name="stackpart", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except StackpartError as exc:
        click.echo(f"error: {exc}", err=True)
        for line in exc.also:
            click.echo(f"error: {line}", err=True)
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
