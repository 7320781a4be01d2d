"""The ``stackpart`` command line: argument parsing only; each command calls one function.

Exit codes follow ruff and black: 0 clean / done, 1 changes pending or findings, 2 usage or input
error (a :class:`~rewriter.errors.StackpartError`, printed as ``path:line:col: message``).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from . import __version__
from .errors import StackpartError

F = TypeVar("F", bound=Callable[..., Any])


class _Choice(click.Choice):
    """click's Choice whose refusal names the nearest choice (``--mode train`` -> ``training``)."""

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            from .errors import near_names

            hint = near_names(str(value), [str(c) for c in self.choices])
            self.fail(f"{value!r} is not one of {', '.join(repr(str(c)) for c in self.choices)}"
                      + (f" ({hint})" if hint else ""), param, ctx)


class _SrcDir(click.ParamType):
    """SRC: an existing folder, refused in one line with a near name (:func:`rewriter.errors.src_dir`)."""

    name = "directory"

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        from .errors import src_dir

        src_dir(value)
        return value


SRC_DIR = _SrcDir()


class _Shape(click.ParamType):
    """``--shape name=int,...``: parsed while the command line is read (:func:`rewriter.shapes.parse_shape`),
    so a bad value is a usage error naming the option and the value before anything runs or is written."""

    name = "name=int,..."

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        from .shapes import SHAPE_SYNTAX, parse_shape

        if isinstance(value, dict):  # a default or a caller's already parsed shape
            return value
        try:
            return parse_shape(value)
        except ValueError as exc:
            self.fail(f"{value!r}: {exc}; expected {SHAPE_SYNTAX}", param, ctx)


SHAPE = _Shape()


class SectionedCommand(click.Command):
    """A command whose ``--help`` lists its options in sections, the common ones first
    (``sections``: ``(title, (parameter name, ...))`` pairs; the rest under "Other options").
    click's own formatter does the layout (``HelpFormatter.section``/``write_dl``).

    Why an override of :meth:`click.Command.format_options` and not a library: click itself has no
    option sections (its help writes one "Options" list), and the libraries that add them
    (``click-option-group``, ``rich-click``) are not dependencies of stackpart; this override is the
    extension point click documents for the help's layout, and it changes nothing but the order and
    titles of the rows click writes.
    """

    def __init__(self, *args: object, sections: tuple[tuple[str, tuple[str, ...]], ...] = (), **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sections = sections

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        help_option = self.get_help_option(ctx)
        records = {("help" if p is help_option else p.name): p.get_help_record(ctx)
                   for p in self.get_params(ctx) if isinstance(p, click.Option)}
        placed: set[str | None] = set()
        for title, names in self.sections:
            rows = [records[n] for n in names if records.get(n)]
            placed.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)  # type: ignore[arg-type]
        rest = [r for n, r in records.items() if r and n not in placed]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)


def timing_options(command: str) -> Callable[[F], F]:
    """The options diagnose's search and validate share for timing on CUDA, declared once:
    ``--no-overlap``, ``--pin``, ``--host`` and ``--nproc`` (``command`` names what the help says
    is timed). See docs/measuring-on-a-gpu.md."""
    timed = "the search's candidates are" if command == "diagnose" else "each variant is"
    options = [
        click.option("--no-overlap", is_flag=True,
                     help="Run the eager reference alone before the first compile (default: overlapped, on a GPU host "
                          "with >= 8 CPUs)."),
        click.option("--pin", type=_Choice(["shared", "fastest", "own", "off"]), default="shared", show_default=True,
                     help="Where timed processes' main threads run on CUDA: shared (one core of median speed, one process "
                          "at a time), fastest (the fastest core), own (a core each) or off (the scheduler's)."),
        click.option("--host", "host", type=_Choice(["both", "quiet"]), default="both", show_default=True,
                     help=f"Host conditions {timed} timed in on CUDA: both (also with a busy loop on the shared core; "
                          + ("the plan is the least behind in the worse" if command == "diagnose" else "the plan must pass there too")
                          + ") or quiet (a dedicated host)."),
        click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Processes (one per GPU) under torchrun; > 1 " + (
                         "diagnoses collectives across ranks." if command == "diagnose"
                         else "runs original and plan on N processes and compares step time and exposed communication.")),
    ]

    return _stacked(options)


def measurement_options(command: str) -> Callable[[F], F]:
    """``--backend`` and ``--timeout``, declared once for diagnose and validate: one flag, type and
    parameter name each; the default and help are the command's own (``command``), since diagnose's
    backend is chosen by the device when left out and validate's compiles its two baselines, and a
    diagnose harness call and a validate child process get different time limits."""
    diagnose = command == "diagnose"
    return _stacked([
        click.option("--backend", default=None if diagnose else "inductor", show_default=not diagnose,
                     help="torch.compile backend of the search's candidates (default: inductor on CUDA; eager on CPU, "
                          "forced on every compile: failures measured, gains not)." if diagnose
                          else "torch.compile backend of the two baselines."),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300.0 if diagnose else 600.0,
                     show_default=True,
                     help="Seconds one harness call may take." if diagnose else "Seconds per child process."),
    ])


def _stacked(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    """One decorator applying ``options`` in order (the first is listed first)."""

    def apply(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stackpart")
def cli() -> None:
    """Measure which performance ceiling binds in a PyTorch model and rewrite its source with the
    one mechanism that attacks it: diagnose -> plan.yaml -> rewrite -> validate -> apply."""


@cli.command()
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False), help="plan.yaml to apply.")
@click.argument("src", type=SRC_DIR)
@click.option("--apply", is_flag=True, help="Write the changes (atomically) instead of printing the diff.")
@click.option("--check", is_flag=True, help="Exit 1 when the tree differs from what the plan asks (pre-commit).")
@click.option("--unsafe", is_flag=True, help="Also write unsafe actions (bucket, kernel): they change what runs.")
@click.option("--no-validate", is_flag=True, help="--apply without a passing validation report for this diff.")
@click.option("--report", "report", type=click.Path(), default=None,
              help="Validation report to check before --apply (default: .stackpart/validation/ next to the plan; validation-<stem>/ for a plan not named plan.yaml).")
@click.option("--summary-md", type=click.Path(dir_okay=False), default=None,
              help="Also write a Markdown summary (for a pull-request comment) to this file.")
@click.pass_context
def rewrite(ctx: click.Context, plan_path: str, src: str, apply: bool, check: bool, unsafe: bool,
            no_validate: bool, report: str | None, summary_md: str | None) -> None:
    """Rewrite SRC as the plan asks: print a git-style diff (paths relative to SRC)."""
    from .rewrite.command import rewrite_command

    if apply and check:
        raise click.UsageError("--apply and --check exclude each other")
    ctx.exit(rewrite_command(plan_path, src, apply=apply, check=check, unsafe=unsafe,
                             validate=not no_validate, report=report, summary_md=summary_md))


@cli.command(cls=SectionedCommand, sections=(
    ("Common options", ("plan_path", "out", "speed_gate", "min_speedup", "help")),
    ("Measurement", ("backend", "baselines", "timeout", "reps", "warmup", "keep_temp")),
    ("Timing on CUDA (docs/measuring-on-a-gpu.md)", ("no_overlap", "pin", "host", "processes", "windows", "construct_on")),
    ("Distributed (docs/distributed.md)", ("nproc",)),
))
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False), help="plan.yaml (with harness:).")
@click.argument("src", type=SRC_DIR)
@click.option("--out", "out", type=click.Path(file_okay=False), default=None,
              help="Report directory (default: .stackpart/validation/ next to the plan; validation-<stem>/ for a plan not named plan.yaml).")
@measurement_options("validate")
@click.option("--min-speedup", type=float, default=0.95, show_default=True,
              help="Fail when t_best_baseline / t_plan is below this.")
@click.option("--speed-gate", type=_Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="Gate speed and amortization (auto: only when timed on CUDA).")
@click.option("--reps", type=int, default=30, show_default=True, help="Interleaved timing rounds per shape (max).")
@click.option("--warmup", type=int, default=3, show_default=True, help="Warm-up calls per variant and shape.")
@click.option("--baselines", default="whole,regional", show_default=True,
              help="Comma-separated baselines besides eager: whole, regional ('none' or empty for none).")
@click.option("--keep-temp", is_flag=True, help="Keep the temp trees and child logs.")
@timing_options("validate")
@click.option("--construct-on", type=_Choice(["device", "host"]), default="device", show_default=True,
              help="Where each child builds the model: on the device (the host when that raises) or on the host.")
@click.option("--processes", type=_Choice(["auto", "1", "2"]), default="auto", show_default=True,
              help="Timed processes per variant: 2 gives each a second process that runs Inductor's autotuning again, the faster standing (auto: 2 on CUDA, 1 on CPU).")
@click.option("--windows", type=_Choice(["auto", "1", "2"]), default="auto", show_default=True,
              help="Timing windows per shape, the faster standing (auto: 2 on CUDA, 1 on CPU).")
@click.pass_context
def validate(ctx: click.Context, plan_path: str, src: str, out: str | None, backend: str, min_speedup: float,
             speed_gate: str, timeout: float, reps: int, warmup: int, baselines: str, keep_temp: bool,
             no_overlap: bool = False, construct_on: str = "device", pin: str = "shared", processes: str = "auto",
             windows: str = "auto", host: str = "both", nproc: int = 1) -> None:
    """Prove a rewrite before it is applied: numerics, speed, compile cost; exit 0 pass, 1 fail, 2 error."""
    from pathlib import Path

    from .needs_torch import require_torch

    require_torch("validate")

    if nproc > 1:
        from .distributed.command import validate_distributed_command

        ctx.exit(validate_distributed_command(plan_path, src, nproc=nproc, out=out, timeout_s=timeout,
                                              min_speedup=min_speedup, speed_gate=speed_gate))

    from .validate.command import Options, validate_command

    names = () if baselines.strip().lower() == "none" else tuple(b.strip() for b in baselines.split(",") if b.strip())
    bad = [b for b in names if b not in ("whole", "regional")]
    if bad:
        raise click.UsageError(f"--baselines: unknown {', '.join(bad)}; expected whole, regional")
    if not names and ctx.get_parameter_source("min_speedup") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--min-speedup compares the plan with the better of --baselines (whole, regional), and "
                               "--baselines leaves none: give one, or drop --min-speedup")
    opts = Options(out=Path(out) if out else None, backend=backend, min_speedup=min_speedup,
                   speed_gate=speed_gate, timeout_s=timeout, reps=reps, warmup=warmup,
                   keep=keep_temp, variants=("eager", "plan") + names, overlap=not no_overlap,
                   construct_on_device=construct_on == "device", pin=pin,
                   replicates=0 if processes == "auto" else int(processes), windows=0 if windows == "auto" else int(windows),
                   contended=host == "both")
    ctx.exit(validate_command(plan_path, src, opts))


@cli.command()
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--select", multiple=True, help="Only these rule codes or prefixes (SP101, SP1); repeatable.")
@click.option("--ignore", multiple=True, help="Skip these rule codes or prefixes; repeatable.")
@click.option("--fix", is_flag=True, help="Apply the rules' safe fixes, and the plan's pending edits when rewrite --apply would (a passing validation report for this diff), atomically.")
@click.option("--no-validate", "no_validate", is_flag=True, help="With --fix: write the plan's edits without a passing validation report.")
@click.option("--diff", "show_diff", is_flag=True, help="Print the safe fixes as a diff; write nothing.")
@click.option("--format", "fmt", type=_Choice(["text", "json", "github", "sarif"]), default="text",
              show_default=True, help="Report format.")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), default=None,
              help="plan.yaml: FILES must already be as it rewrites them (default: [tool.stackpart] plan).")
@click.option("--src", type=SRC_DIR, default=None, help="Root the plan's targets are relative to.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes (default: CPU count).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write the report here, not stdout.")
@click.option("--no-project", "no_project", is_flag=True, default=None,
              help="Check each file on its own: do not read the project (the nearest folder with pyproject.toml or .git) for compiles in other files.")
@click.pass_context
def check(ctx: click.Context, files: tuple[str, ...], select: tuple[str, ...], ignore: tuple[str, ...], fix: bool,
          no_validate: bool, show_diff: bool, fmt: str, plan_path: str | None, src: str | None, jobs: int | None,
          output: str | None, no_project: bool | None) -> None:
    """Static suggestions (SP1xx rules) and plan drift for FILES (the pre-commit entry)."""
    from .check.command import check_command

    if fix and show_diff:
        raise click.UsageError("--fix and --diff exclude each other")
    ctx.exit(check_command(files, select, ignore, fix=fix, fmt=fmt, plan=plan_path, src=src, jobs=jobs, output=output,
                           diff=show_diff, validate=not no_validate, project=False if no_project else None))


@cli.command(cls=SectionedCommand, sections=(
    ("Common options", ("harness", "output", "shapes", "mode", "dtype", "device", "verbose", "help")),
    ("Search", ("budget", "no_search", "backend", "runs", "restarts", "report_dir")),
    ("Harness and program", ("model", "inputs", "call", "timeout", "steps", "entry", "site")),
    ("Timing on CUDA (docs/measuring-on-a-gpu.md)", ("no_overlap", "pin", "host", "cold_parallel")),
    ("Distributed (docs/distributed.md)", ("nproc", "wrap")),
))
@click.option("--harness", required=True, help="harness.py under SRC, or a plan.yaml whose harness: section is used.")
@click.argument("src", type=SRC_DIR)
@click.option("-o", "--output", default="plan.yaml", show_default=True, type=click.Path(dir_okay=False), help="Where the plan goes.")
@click.option("--model", default=None, help="Model factory in the harness (default build_model).")
@click.option("--inputs", default=None, help="Input factory in the harness (default make_inputs).")
@click.option("--call", default=None, help="The model's method each step calls, e.g. inverse, generate, encode (harness.call; default: the module itself, its forward).")
@click.option("--shape", "shapes", multiple=True, type=SHAPE, help="An input shape, e.g. batch=8,seq=512; repeatable, the first is the reference (default: the harness's own, said when it runs).")
@click.option("-v", "--verbose", is_flag=True, help="Also print a line per rung and per measurement event (they always go to diagnose.log).")
@click.option("--mode", type=_Choice(["inference", "training"]), default=None)
@click.option("--dtype", type=_Choice(["float32", "bfloat16", "float16"]), default=None)
@click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available).")
@click.option("--report-dir", default=None, type=click.Path(file_okay=False), help="report.md/json, charts, trace (default: next to the plan).")
@measurement_options("diagnose")
@click.option("--budget", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds for the search (default: on a GPU what the setup and the ladder left of 3 minutes, 60-120; on a CPU 120): a candidate's cold phase starts only when it is expected to end within them, timing included; the others are skipped and say why. The whole-model compile, the anchor every plan is compared with, is always measured.")
@click.option("--no-search", "no_search", is_flag=True, default=False,
              help="Write the ladder rules' proposal without measuring candidate plans (no validation report).")
@click.option("--runs", type=click.IntRange(min=1), default=None, help="amortization.runs (expected calls).")
@click.option("--restarts", type=click.IntRange(min=1), default=None, help="amortization.restarts.")
@click.option("--steps", type=click.IntRange(min=1), default=3, show_default=True, help="Profiled steps.")
@click.option("--entry", default=None, help="file.py::func under SRC: the program's entry point (runs before the first CUDA allocation); where the allocator action goes.")
@click.option("--site", default=None, help="file.py::func under SRC that returns the model (e.g. train.py::build): where actions on an installed library's blocks (transformers, timm) are applied. Default: the harness's model function.")
@timing_options("diagnose")
@click.option("--cold-parallel", type=click.IntRange(min=1, max=8), default=None,
              help="Candidates' cold phases at a time (default: 2 on a GPU host with >= 8 CPUs, else 1).")
@click.option("--wrap", type=_Choice(["ddp", "fsdp2", "none"]), default=None,
              help="With --nproc: data-parallel wrapper (default: harness STACKPART_DISTRIBUTED, else ddp).")
@click.pass_context
def diagnose(ctx: click.Context, harness: str, src: str, output: str, **kw: object) -> None:
    """Run the diagnostic ladder on SRC's model and write plan.yaml with the evidence."""
    from .needs_torch import require_torch

    nproc, wrap = kw.pop("nproc"), kw.pop("wrap")
    if nproc > 1:  # type: ignore[operator]
        kw.pop("verbose")
        kw.pop("budget")
        kw.pop("no_search")
        kw.pop("no_overlap")
        kw.pop("pin")
        kw.pop("cold_parallel")
        kw.pop("host")
        if kw.pop("entry") is not None:
            raise click.UsageError("--entry is not supported with --nproc")
        if kw.pop("site") is not None:
            raise click.UsageError("--site is not supported with --nproc")
    elif wrap is not None:
        raise click.UsageError("--wrap needs --nproc 2 or more")
    require_torch("diagnose")  # after the usage errors, which need no torch import to report
    if nproc > 1:  # type: ignore[operator]
        from .distributed.command import diagnose_distributed_command

        ctx.exit(diagnose_distributed_command(harness, src, output, nproc=nproc, wrap=wrap, **kw))  # type: ignore[arg-type]
    from .diagnose.runner import diagnose_command

    ctx.exit(diagnose_command(harness, src, output, **kw))  # type: ignore[arg-type]


@cli.group()
def plan() -> None:
    """Work with plan files."""


@plan.command("schema")
def plan_schema() -> None:
    """Print the JSON Schema of plan.yaml (version 1)."""
    from .plan import json_schema

    click.echo(json_schema())


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (``timeout``, a CI or batch-job kill) unwinds like Ctrl-C: ``finally`` blocks run, so
    validate's child processes are killed and temp trees removed instead of being orphaned."""
    from .signals import Terminated

    raise Terminated(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (tests call this directly, no subprocess).

    SIGTERM exits 143, SIGHUP 129, SIGQUIT 131 and Ctrl-C 130 (see :func:`_terminated`). Called
    with ``argv`` (in-process), the caller's handlers are put back on return; as the program
    (``argv`` None) the handlers in place at the end stay until the process exits, so a
    ``rewrite --apply`` that has written every file (it then ignores them) exits 0 whenever a
    signal comes.
    """
    previous: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        from .signals import SIGNALS

        previous[signal.SIGINT] = signal.getsignal(signal.SIGINT)
        # SIGHUP (terminal closed) and SIGQUIT (Ctrl-\) unwind as SIGTERM does; nohup's SIG_IGN stays
        for signum in SIGNALS:
            if signum == signal.SIGTERM or (signum != signal.SIGINT and signal.getsignal(signum) != signal.SIG_IGN):
                previous[signum] = signal.signal(signum, _terminated)
    try:
        return _main(argv)
    finally:
        if argv is not None:
            for signum, handler in previous.items():
                if handler is not None:
                    signal.signal(signum, handler)  # type: ignore[arg-type]


def _reader_gone() -> bool:
    """Whether the reader of stdout or stderr has closed its end (``poll`` reports an error on a
    pipe whose reader is gone)."""
    import select

    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    for stream in (sys.stdout, sys.stderr):
        try:
            poller.register(stream.fileno(), select.POLLOUT)
        except (AttributeError, OSError, ValueError):
            continue
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _quiet_pipes() -> None:
    """Point stdout and stderr at ``os.devnull``, so the interpreter's flush at exit does not raise
    on a closed pipe (Python's ``signal`` docs, "Note on SIGPIPE")."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (AttributeError, OSError, ValueError):  # replaced (pytest's capture): nothing to point
            continue
    os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    try:
        result = cli.main(args=list(argv) if argv is not None else None, prog_name="stackpart", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `stackpart` / `stackpart plan`: the help
            exc.show()
            return 2
        # one line like every other input error, not click's three-line usage block
        where = exc.ctx.command_path if exc.ctx is not None else "stackpart"
        text = " ".join(exc.format_message().split())
        click.echo(f"error: {text}" + ("" if "did you mean" in text.lower() else f" (see '{where} --help')"), err=True)
        return 2
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except StackpartError as exc:
        click.echo(f"error: {exc}", err=True)
        for line in exc.also:
            click.echo(f"error: {line}", err=True)
        return 2
    except BrokenPipeError:
        # the reader of stdout or stderr went away (`stackpart rewrite ... | head`): nothing more can
        # be said; the exit code of a process that SIGPIPE would have ended, and no traceback. A
        # broken pipe of anything else is a bug, and raised.
        if not _reader_gone():
            raise
        _quiet_pipes()
        return 128 + 13
    except OSError as exc:
        # An output path that cannot be written (-o, --summary-md, --out in a missing or read-only
        # directory) is bad input, not a crash: one line, exit 2. No filename: a bug, re-raise.
        if exc.filename is None:
            raise
        click.echo(f"error: {exc.filename}: {exc.strerror or exc}", err=True)
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
