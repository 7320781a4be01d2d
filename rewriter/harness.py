"""The harness protocol shared by diagnose and validate: build the model and its inputs.

A harness file (relative to SRC) defines ``model() -> torch.nn.Module`` and
``inputs(**shape) -> tuple | dict`` of tensors (names from plan.yaml's ``harness:``). A step calls
the model itself, or the method ``harness.call`` names (``model.inverse(*inputs)``), always
through :func:`call_model`. It is
imported with SRC first on ``sys.path``, so ``from model import GPT`` finds the tree under test
(the original or the rewritten copy).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .definition import defined_at, relpath
from .errors import ConfigError, StackpartError, near_names, near_path
from .plan import Harness
from .source import safe_relpath

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


@dataclass
class LoadedHarness:
    """A harness whose file imported and whose callables and shape keys check out.

    Attributes:
        spec: the ``harness:`` section.
        src: the tree the harness was imported from.
        build_model: the model factory, ``() -> nn.Module``.
        make_inputs: the input factory, ``(**shape) -> tuple | dict`` of tensors.
    """

    spec: Harness
    src: Path
    build_model: Callable[[], Any]
    make_inputs: Callable[..., Any]


def _user_frame(exc: BaseException, src: Path, file: str) -> tuple[str, int | None]:
    """Where in the user's code under ``src`` ``exc`` was raised, relative to SRC as every other
    error names a file (:func:`rewriter.tracebacks.user_site`); ``(file, None)`` (the harness file)
    when no frame is under SRC."""
    from .tracebacks import user_site

    rel, line, _ = user_site(exc, Path(src))
    return (rel, line) if rel is not None else (file, None)


def _syntax_path(filename: str | None, src: Path, file: str) -> str:
    """A syntax error's file relative to SRC; a file outside SRC (an installed package) as Python
    names it, and ``file`` (the harness) when it names none."""
    if not filename:
        return file
    return relpath(src, filename) or filename


@contextmanager
def on_sys_path(src: Path) -> Iterator[None]:
    """Put ``src`` first on ``sys.path`` for the duration (imports resolve to this tree).

    Modules already imported from another tree under a name this tree defines (``model`` from
    a previous harness in the same process) are evicted from ``sys.modules`` first, so
    ``from model import GPT`` finds this tree's file and not the cached one; so are this tree's
    own modules whose file changed since the last time this tree was on the path (a diagnose
    after ``rewrite --apply`` in the same process imports the rewritten file).
    """
    entry = str(Path(src).resolve())
    root = Path(entry)
    for name, module in list(sys.modules.items()):
        path = _tree_module_file(root, name, module)
        if path is None:
            continue
        # imported from this tree by the path as imported or as resolved: a symlinked file under
        # SRC (a symlink farm over an installed package) resolves outside SRC but is this tree's
        ours = path.is_relative_to(root) or path.resolve().is_relative_to(root)
        if not ours or _SEEN.get(str(path), _mtime(path)) != _mtime(path):
            del sys.modules[name]
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        if entry in sys.path:
            sys.path.remove(entry)
        for name, module in list(sys.modules.items()):
            path = _tree_module_file(root, name, module)
            if path is not None:
                _SEEN[str(path)] = _mtime(path)


#: File (as imported) -> its mtime (ns) when its tree last left ``sys.path``.
_SEEN: dict[str, int | None] = {}


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _tree_module_file(root: Path, name: str, module: Any) -> Path | None:
    """The file of ``module`` when its top-level name is one ``root`` defines and it is not the
    standard library or an installed package; else None."""
    top = name.split(".", 1)[0]
    if not ((root / f"{top}.py").is_file() or (root / top / "__init__.py").is_file()):
        return None
    file = getattr(module, "__file__", None)
    if file is None or file.startswith((sys.prefix, sys.base_prefix)):
        return None  # builtins, the standard library and installed packages stay
    return Path(file).absolute()


#: What an unset ``harness.device`` means, in the words the reports use.
AUTO_DEVICE_RULE = "harness.device unset: cuda when torch sees a CUDA device, else cpu"


def resolve_device(spec: Harness) -> Harness:
    """``spec`` with its device resolved: a harness that names none runs on ``cuda`` when torch
    sees a CUDA device, else on ``cpu`` (diagnose and validate alike); a named device is kept
    (diagnose refuses ``cuda`` without a GPU, validate runs it on the CPU and says so)."""
    if spec.device is not None:
        return spec
    import torch

    return spec.model_copy(update={"device": "cuda" if torch.cuda.is_available() else "cpu"})


def device_record(requested: str | None, used: str) -> dict[str, str]:
    """What the reports say about the device: ``device`` (the one used), ``requested_device``
    (the harness's, ``unset`` when it names none) and ``device_rule`` (why that one)."""
    import torch

    cuda = torch.cuda.is_available()
    if requested is None:
        why = f"{AUTO_DEVICE_RULE} ({'torch sees one' if cuda else 'torch sees none'})"
    elif requested == used:
        why = f"harness.device is {requested}"
    else:
        why = f"harness.device is {requested}, but torch sees no CUDA device: ran on {used}"
    return {"device": used, "requested_device": requested or "unset", "device_rule": why}


def load_harness(spec: Harness, src: Path) -> LoadedHarness:
    """Import the harness file under ``src`` and check its callables and shape keys.

    Raises:
        StackpartError: the file is missing or leaves SRC, or importing it raises (at the user's
            line).
        ConfigError: a callable is missing or not callable (with near names), a shape key is not
            a parameter of the inputs callable (with near names), or a shape repeats another once
            the inputs callable's defaults apply; at the harness file, its ``field`` the
            ``harness:`` field at fault (``model``, ``shapes[1]``, ``shapes[0].seq``), for the
            plan's line of it where the field came from a plan (:func:`config_error_at`).
    """
    src = Path(src)
    path = safe_relpath(src, spec.file)
    if not path.is_file():
        raise StackpartError("harness file not found under SRC", path=spec.file, hint=near_path(path, spec.file, dirs=False))
    # one name for one file in every process (str hash is salted per process): what the harness
    # defines pickles into a child by this name (a spawned DataLoader worker, the engine's children)
    name = f"_stackpart_harness_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:16]}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    # registered as an import would: Dynamo, inlining a harness function a library module calls
    # (a library function the harness replaced), reads that function's globals by importing its module
    sys.modules[name] = module
    with on_sys_path(src):
        try:
            module_spec.loader.exec_module(module)
        except SyntaxError as exc:  # in the harness or a module it imports: no frame of its own
            sys.modules.pop(name, None)
            raise StackpartError(
                f"importing the harness failed: syntax error: {exc.msg}",
                path=_syntax_path(exc.filename, src, spec.file), line=exc.lineno, col=exc.offset if exc.lineno else None,
            ) from exc
        except Exception as exc:  # the user's code: any exception is an input error
            sys.modules.pop(name, None)
            file, line = _user_frame(exc, src, spec.file)
            raise StackpartError(
                f"importing the harness raised {type(exc).__name__}: {exc}", path=file, line=line
            ) from exc
        except BaseException:  # sys.exit or argparse at import: not the user's input error, but no module either
            sys.modules.pop(name, None)
            raise
    public = [n for n in vars(module) if not n.startswith("_")]
    funcs = []
    for field in ("model", "inputs"):
        attr = getattr(spec, field)
        fn = getattr(module, attr, None)
        if not callable(fn):
            # a name bound to something else (``model = Net()``) is no typo: say what it holds
            bound = hasattr(module, attr)
            raise ConfigError(
                f"harness.{field}: {spec.file} binds {attr!r} to an object of type {type(fn).__name__}, not a callable (expected "
                f"{'a function that returns the model' if field == 'model' else 'a function that returns the inputs'})"
                if bound else f"harness.{field}: {spec.file} defines no callable {attr!r}",
                path=spec.file,
                hint=near_names(attr, [n for n in public if n != attr and callable(getattr(module, n, None))]),
                field=field,
            )
        funcs.append(fn)
    build_model, make_inputs = funcs
    params = inspect.signature(make_inputs).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for i, shape in enumerate(spec.shapes):
        for key in shape:
            if key not in params and not takes_kwargs:
                raise ConfigError(
                    f"harness.shapes[{i}]: {spec.inputs}() has no parameter {key!r}",
                    path=spec.file,
                    hint=near_names(key, params),
                    field=f"shapes[{i}].{key}",
                )
    defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
    seen: dict[tuple, int] = {}
    for i, shape in enumerate(spec.shapes):
        full = tuple(sorted({**defaults, **shape}.items(), key=lambda kv: kv[0]))
        if full in seen:
            raise ConfigError(
                f"harness.shapes[{i}] is the same shape as harness.shapes[{seen[full]}] once {spec.inputs}()'s defaults "
                f"apply ({', '.join(f'{k}={v}' for k, v in full)}): a repeated shape hides recompiles",
                path=spec.file,
                hint="drop it or give the varying dimension its own value; a value that changes between calls at one shape "
                     "(a step counter, a cache's fill level) needs no repeat: diagnose calls the first shape 3 times itself",
                field=f"shapes[{i}]",
            )
        seen[full] = i
    return LoadedHarness(spec=spec, src=src, build_model=build_model, make_inputs=make_inputs)


def _top_level(tree: ast.Module) -> tuple[dict[str, ast.AST], bool]:
    """The names a module binds at its top level (also inside top-level ``if``/``try``/``with``
    blocks) -> the binding node, and whether it has a ``from x import *`` (then any name may be
    bound)."""
    bound: dict[str, ast.AST] = {}
    star = False
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] = node
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    star = True
                else:
                    bound[(alias.asname or alias.name).split(".", 1)[0]] = node
            continue
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                todo.append(child)
                continue
            if isinstance(child, ast.excepthandler):
                todo.extend(child.body)
                if child.name:
                    bound.setdefault(child.name, node)
                continue
            if isinstance(child, ast.match_case):
                todo.extend(child.body)
            for sub in ast.walk(child):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    bound.setdefault(sub.id, node)
                elif isinstance(sub, (ast.MatchAs, ast.MatchStar)) and sub.name:
                    bound.setdefault(sub.name, node)
    return bound, star


def _at(loaded: Any, *keys: object) -> dict[str, int | None]:
    line, col = loaded.mark_of("harness", *keys)
    return {"line": line, "col": col}


def _field_keys(field: str) -> tuple[object, ...]:
    """A :class:`ConfigError` field as the plan's YAML path under ``harness:``: ``call`` ->
    ``("call",)``, ``shapes[1]`` -> ``("shapes", 1)``, ``shapes[0].seq`` -> ``("shapes", 0, "seq")``."""
    return tuple(int(index) if index else name for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", field))


def config_error_at(loaded: Any, message: str, field: str | None, hint: str | None = None) -> ConfigError:
    """A :class:`ConfigError` (``message``, the ``harness:`` field it names, ``hint``) at the line of
    that field in the plan ``loaded`` (:class:`rewriter.plan.LoadedPlan`), as :func:`check_harness`
    names the fields it checks without running the harness; at ``harness:`` without a field."""
    mark = _at(loaded, *_field_keys(field)) if field else _at(loaded)
    return ConfigError(message, path=str(loaded.path), field=field, hint=hint, **mark)


def check_harness_file(loaded: Any, src: Path) -> Path:
    """The path of a plan's ``harness.file`` under ``src``, checked to be a file there.

    Raises:
        StackpartError: at the plan's line of ``harness.file``, with a near name.
    """
    spec = loaded.plan.harness
    path = safe_relpath(Path(src), spec.file)
    if not path.is_file():
        raise StackpartError(f"harness.file: {spec.file} not found under SRC ({src})", path=loaded.path,
                             **_at(loaded, "file"), hint=near_path(path, spec.file, dirs=False))
    return path


def check_harness(loaded: Any, src: Path) -> None:
    """Check a plan's ``harness:`` against its file without running it, before any child starts
    (validate): the file exists under SRC, defines the ``model`` and ``inputs`` callables, and
    every shape key is a parameter of the inputs function. Names bound otherwise than by ``def``
    (an import, an assignment) are taken as they are: only running them can tell.

    Raises:
        StackpartError: at the plan's line of the field at fault, with diagnose's message and its
            near names; a syntax error at the harness file's line.
    """
    from .source import read_file

    spec = loaded.plan.harness
    plan = loaded.path
    path = check_harness_file(loaded, src)
    text = read_file(path, spec.file).text
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise StackpartError(f"harness file: syntax error: {exc.msg}", path=spec.file, line=exc.lineno,
                             col=exc.offset if exc.lineno else None) from None
    bound, star = _top_level(tree)
    public = [n for n in bound if not n.startswith("_")]
    for field in ("model", "inputs"):
        name = getattr(spec, field)
        if name not in bound and not star:
            raise StackpartError(f"harness.{field}: {spec.file} defines no callable {name!r}", path=plan,
                                 **_at(loaded, field), hint=near_names(name, public))
    fn = bound.get(spec.inputs)
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.args.kwarg is not None:
        return
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
    keywords = [a.arg for a in (*fn.args.args, *fn.args.kwonlyargs)]
    for i, shape in enumerate(spec.shapes):
        for key in shape:
            if key not in keywords:
                raise StackpartError(f"harness.shapes[{i}]: {spec.inputs}() has no parameter {key!r}", path=plan,
                                     **_at(loaded, "shapes", i, key), hint=near_names(key, params))


def scalar_loss(out: Any) -> Any:
    """The scalar a training step backpropagates (diagnose and validate alike): the output itself
    when it is one scalar tensor (a harness that returns its loss), else the sum over floating
    leaves of ``mean(leaf.float() ** 2)`` (every output gets a gradient).

    Raises:
        ValueError: no floating tensor in ``out``.
    """
    import torch
    from torch.utils import _pytree as pytree

    leaves = [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    if len(leaves) == 1 and leaves[0].numel() == 1:
        return leaves[0].float().reshape(())
    if not leaves:
        raise ValueError("training mode needs a floating tensor output to backpropagate")
    return sum(x.float().pow(2).mean() for x in leaves)


def _to(value: Any, device: Any, dtype: Any) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if x.is_floating_point():
                x = x.to(dtype)
        return x

    return pytree.tree_map(move, value)


def torch_dtype(spec: Harness) -> Any:
    """The ``torch.dtype`` named by ``spec.dtype``."""
    import torch

    return getattr(torch, DTYPES[spec.dtype])


def build(h: LoadedHarness, shape: dict[str, int] | None = None) -> tuple[Any, Any]:
    """Build the model and the inputs for ``shape`` (default: the reference shape), on the
    harness's device and dtype, in eval mode for ``inference`` and train mode for ``training``.

    Raises:
        StackpartError: a harness callable raised or returned the wrong kind of object, naming
            the callable and the user's line.
    """
    model, _ = build_model(h)
    return model, build_inputs(h, shape)


def build_model(h: LoadedHarness, construct_on: str | None = None) -> tuple[Any, str | None]:
    """Only the model, as :func:`build` makes it; returns ``(model, fallback)``.

    ``construct_on``: a device to construct the model on (``torch.device`` as the default
    device while ``model()`` runs), so parameter initialisation runs there rather than on the
    host: host random init was 16.6 s of a 20.8 s validation child start-up for a 0.3B HF Llama
    on a GPU host (docs/decisions.md, "Building the model on the device"). Values differ from a
    host-built model (another RNG),
    which does not matter to a caller that loads weights afterwards or compares processes
    built the same way. When ``model()`` raises under it (host-only code in ``__init__``, such
    as ``.numpy()``), the model is built again on the host and ``fallback`` says why (None
    otherwise).

    Raises:
        StackpartError: ``model()`` raised on the host, or returned something other than an
            ``nn.Module``, naming the callable and the user's line; or the model has no method
            ``harness.call`` names (:func:`check_entry`).
    """
    import torch

    spec = h.spec
    fallback = None
    with on_sys_path(h.src):
        model = None
        if construct_on and torch.device(construct_on).type != "cpu":
            rng = torch.random.get_rng_state()
            try:
                with torch.device(construct_on):
                    model = h.build_model()
            except Exception as exc:  # host-only code in the constructor: build it as the user does
                fallback = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
                torch.random.set_rng_state(rng)  # the host build draws what it would have alone
        if model is None:
            model = _call(h, "model", h.build_model)
    if not isinstance(model, torch.nn.Module):
        raise StackpartError(
            f"harness.model: {spec.model}() returned {type(model).__name__}, expected torch.nn.Module",
            path=spec.file,
        )
    check_entry(model, spec, h.src)
    model = model.to(device=resolve_device(spec).device, dtype=torch_dtype(spec))
    model.train(spec.mode == "training")
    return model, fallback


def build_inputs(h: LoadedHarness, shape: dict[str, int] | None = None) -> Any:
    """Only the inputs for ``shape`` (default: the reference shape), on the harness's device and
    dtype (floating tensors cast; integer tensors keep their dtype), as :func:`build` makes them.

    Raises:
        StackpartError: the inputs callable raised, naming it and the user's line.
    """
    spec = h.spec
    shape = spec.shapes[0] if shape is None else shape
    with on_sys_path(h.src):
        inputs = _call(h, "inputs", h.make_inputs, **shape)
    if not isinstance(inputs, (tuple, list, dict)):
        inputs = (inputs,)
    return _to(inputs, resolve_device(spec).device, torch_dtype(spec))


def _call(h: LoadedHarness, field: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
    try:
        return fn(**kwargs)
    except Exception as exc:
        file, line = _user_frame(exc, h.src, h.spec.file)
        raise StackpartError(
            f"harness.{field}: {getattr(h.spec, field)}({', '.join(f'{k}={v}' for k, v in kwargs.items())}) "
            f"raised {type(exc).__name__}: {exc}",
            path=file,
            line=line,
        ) from exc


def model_class(model: Any) -> str:
    """The model's own class name, through a ``torch.compile`` wrapper (``OptimizedModule``'s
    ``_orig_mod``)."""
    return type(getattr(model, "_orig_mod", model)).__name__


def model_entry(model: Any, call: str | None) -> Callable[..., Any]:
    """What a step calls: ``model`` itself (``call`` None: ``nn.Module.__call__``, hooks and
    ``forward``), else its method ``call`` as the program gets it (``model.inverse``). On a
    ``torch.compile(model)`` wrapper that is the original module's bound method, which runs
    eager: ``OptimizedModule`` compiles ``forward`` only and its ``__getattr__`` returns the
    wrapped module's attributes (torch/_dynamo/eval_frame.py)."""
    return model if call is None else getattr(model, call)


def compile_entry(model: Any, call: str | None, **options: Any) -> Any:
    """``torch.compile(model, **options)`` whose entry a step calls is compiled: with ``call`` set,
    the wrapper's own attribute ``call`` is ``torch.compile`` of the model's bound method (set on
    the wrapper alone, so ``model`` is left as built), since the wrapper compiles only ``forward``
    (:func:`model_entry`). ``parameters()`` and the other attributes are the model's."""
    import torch

    compiled = torch.compile(model, **options)
    if call is not None:
        # OptimizedModule.__setattr__ forwards to the wrapped module: set it on the wrapper itself
        object.__setattr__(compiled, call, torch.compile(getattr(model, call), **options))
    return compiled


def _defined_at(obj: Any, src: Path | None, what: str | None = None) -> str:
    """`` (model.py:26)`` (``what`` first where given: `` (class Net, model.py:5)``): where
    ``obj``, a function or class, is defined (:func:`rewriter.definition.defined_at`: a decorated
    function's first decorator line; a class of the harness module itself too), its file relative
    to ``src`` where under it; `` (what)`` or ``""`` where the source cannot be found (a C
    extension, code built by ``exec``), the file alone where its line cannot."""
    site = defined_at(obj, src)
    if site is None:
        return f" ({what})" if what else ""
    shown, line = site
    return f" ({what + ', ' if what else ''}{shown}{'' if line is None else f':{line}'})"


def check_entry(model: Any, spec: Harness, src: Path | None = None) -> None:
    """Check that the built ``model`` has the method ``spec.call`` names (nothing to check when
    unset). ``src``: the tree the model's code comes from, which the ``file:line`` of a property
    that raises is named relative to.

    Raises:
        ConfigError: at the harness file, naming ``harness.call``, the model's class and the
            near method names when ``model`` has no such attribute or it is not callable; and
            where it is a generator or ``async def`` method (calling it runs none of its body:
            https://docs.python.org/3/reference/expressions.html#generator-iterator-methods);
            and where reading the attribute raises anything but ``AttributeError`` (the user's
            property or ``__getattr__`` raised), naming the exception's type and message and
            where the property is defined (its ``file:line``; the model's class where it is no
            property).
    """
    if spec.call is None:
        return
    cls = model_class(model)
    try:
        attr = getattr(model, spec.call, None)
    except Exception as exc:  # AttributeError is getattr's default; anything else is the user's code raising
        inner = getattr(model, "_orig_mod", model)
        static = inspect.getattr_static(type(inner), spec.call, None)
        if isinstance(static, (property, functools.cached_property)):
            kind, where = "a property of the model", _defined_at(static.fget if isinstance(static, property) else static.func, src)
        else:
            kind, where = "an attribute of the model", _defined_at(type(inner), src, f"class {cls}")
        raise ConfigError(
            f"harness.call: reading {cls}.{spec.call}{where}, {kind}, raised {type(exc).__name__}: {exc}; name a method "
            "the model has, or make the attribute readable on the built model",
            path=spec.file,
            field="call",
        ) from exc
    lazy = ("a generator function" if inspect.isgeneratorfunction(attr) or inspect.isasyncgenfunction(attr)
            else "a coroutine function" if inspect.iscoroutinefunction(attr) else None)
    if lazy is not None:
        # calling it returns a generator or coroutine object: the step would time no work
        raise ConfigError(
            f"harness.call: {cls}.{spec.call} is {lazy}: a step calling it gets a {lazy.split()[1]} object back and "
            "runs none of its body (no work to measure); name a method that computes its result when called, or "
            "unset harness.call to call the module itself",
            path=spec.file,
            field="call",
        )
    if callable(attr):
        return
    inner = getattr(model, "_orig_mod", model)
    # the class's methods, read statically: a property of the model (a library's) may raise when read
    names = [n for n in dir(type(inner)) if not n.startswith("_") and callable(inspect.getattr_static(type(inner), n, None))]
    what = "" if attr is None and not hasattr(model, spec.call) else f" (its {spec.call} is a {type(attr).__name__})"
    # in the message itself: the message is what an engine child reports of it (validate)
    near = near_names(spec.call, names) or "unset harness.call to call the module itself (its forward)"
    raise ConfigError(
        f"harness.call: {spec.model}() built a {cls}, which has no method {spec.call!r}{what} to call with the "
        f"inputs; {near}",
        path=spec.file,
        field="call",
    )


def call_model(model: Any, inputs: Any, call: str | None = None) -> Any:
    """Call ``model`` (or its method ``call``, :func:`model_entry`) with a tuple (positional) or
    dict (keyword) of inputs: the one way every step of diagnose, validate and the distributed
    worker calls the harness's model."""
    entry = model_entry(model, call)
    if isinstance(inputs, dict):
        return entry(**inputs)
    return entry(*inputs)
