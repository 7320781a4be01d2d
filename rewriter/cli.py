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


@cli.command()
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--select", multiple=True, help="Only these rule codes or prefixes (SP101, SP1); repeatable.")
@click.option("--ignore", multiple=True, help="Skip these rule codes or prefixes; repeatable.")
@click.option("--fix", is_flag=True, help="Apply safe fixes (and the plan's changes on drift), atomically.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github", "sarif"]), default="text",
              show_default=True, help="Report format.")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), default=None,
              help="plan.yaml: FILES must already be as it rewrites them (default: [tool.stackpart] plan).")
@click.option("--src", type=click.Path(file_okay=False), default=None, help="Root the plan's targets are relative to.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes (default: CPU count).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write the report here, not stdout.")
@click.pass_context
def check(ctx: click.Context, files: tuple[str, ...], select: tuple[str, ...], ignore: tuple[str, ...], fix: bool,
          fmt: str, plan_path: str | None, src: str | None, jobs: int | None, output: str | None) -> None:
    """Static suggestions (SP1xx rules) and plan drift for FILES (the pre-commit entry)."""
    from .check.command import check_command

    ctx.exit(check_command(files, select, ignore, fix=fix, fmt=fmt, plan=plan_path, src=src, jobs=jobs, output=output))


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
