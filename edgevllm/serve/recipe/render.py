"""Recipe templates, rendered in a sandbox: a recipe is data from others, never code.

Templates see plain values (strings, numbers, booleans) under plain names, ``{% if %}`` and the
filters in ``FILTERS``; no other statement (loops, ``set``, macros, includes) runs, so a template
cannot loop for hours over a long default either. Everything that reaches a Python object is
refused: attribute access of any kind (``x.__class__``, ``cycler.__init__``), calls of anything but
a listed filter, Jinja's global helpers (``cycler``, ``joiner``, ``namespace``, ``range``,
``lipsum``) and ``*``/``**`` that would build gigabyte strings. The environment of the process is
never a template value, so no expression can print ``HF_TOKEN``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jinja2
import jinja2.meta
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from edgevllm.common.errors import RecipeError
from edgevllm.serve.recipe.schema import Recipe

# The filters recipes use (or may: numbers and lists turned into flag text); none can call code.
FILTERS = ("default", "d", "lower", "upper", "trim", "replace", "int", "float", "string",
           "join", "length", "first", "last", "abs", "round", "min", "max")
_MAX_TEXT = 64 * 1024  # no argument, env value or path of a launch is longer


class RecipeSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, narrowed to names and filters: no attributes, no calls, and
    arithmetic on numbers only, bounded in size."""

    intercepted_binops = frozenset({"*", "**", "%", "//", "/"})

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return False  # recipe values are scalars: no attribute of any object is data

    def is_safe_callable(self, obj: Any) -> bool:
        return False  # filters are applied by Jinja itself, never through this check

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if not isinstance(left, (int, float)) or not isinstance(right, (int, float)):
            raise jinja2.sandbox.SecurityError(f"'{operator}' on anything but numbers")
        if operator == "**" and (abs(right) > 64 or _bits(left) * abs(right) > _MAX_BITS):
            raise jinja2.sandbox.SecurityError("exponent too large")
        found = super().call_binop(context, operator, left, right)
        if _bits(found) > _MAX_BITS:
            raise jinja2.sandbox.SecurityError(f"a number over {_MAX_BITS} bits")
        return found


_MAX_BITS = 4096


def _bits(value: Any) -> int:
    return abs(int(value)).bit_length() if isinstance(value, int) else 64


def _too_long(size: int) -> None:
    if size > _MAX_TEXT:
        raise jinja2.sandbox.SecurityError(f"a filter would make {size} characters (at most "
                                           f"{_MAX_TEXT})")


def _replace(value: Any, old: Any, new: Any, count: Any = None) -> str:
    """``replace``, its result's size checked before it is built."""
    text, old, new = str(value), str(old), str(new)
    times = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        times = min(times, count)
    _too_long(len(text) + times * max(0, len(new) - len(old)))
    return text.replace(old, new, count if isinstance(count, int) else -1)


def _join(value: Any, d: Any = "", attribute: Any = None) -> str:
    """``join`` of plain items (no attribute lookups), its size checked before it is built."""
    if attribute is not None:
        raise jinja2.sandbox.SecurityError("join by attribute is not allowed")
    if isinstance(value, str):
        _too_long(len(value) * (len(str(d)) + 1))
    items = [str(item) for item in value]
    _too_long(sum(map(len, items)) + max(0, len(items) - 1) * len(str(d)))
    return str(d).join(items)


def _bounded(name: str, run: Any) -> Any:
    """Any other filter: its text result checked (none of them amplifies)."""
    @functools.wraps(run)
    def checked(*args: Any, **kwargs: Any) -> Any:
        found = run(*args, **kwargs)
        if isinstance(found, str):
            _too_long(len(found))
        return found
    return checked


# The only statements a recipe template may hold: output, conditions, comments.
_ALLOWED_STATEMENTS = (nodes.Template, nodes.Output, nodes.If)


def _parse(env: RecipeSandbox, text: str) -> nodes.Template:
    """Parse, then refuse any statement but ``{% if %}`` (raised as a syntax error)."""
    try:
        tree = env.parse(text)
    except RecursionError:
        raise jinja2.TemplateSyntaxError("nested too deeply", 1) from None
    for node in tree.find_all(nodes.Stmt):
        if not isinstance(node, _ALLOWED_STATEMENTS):
            name = type(node).__name__.lower()
            raise jinja2.TemplateSyntaxError(f"'{name}' is not allowed in a recipe template "
                                             "(only {% if %})", node.lineno)
    return tree


def environment() -> RecipeSandbox:
    # StrictUndefined: a placeholder nobody defined is an error, never an empty string.
    env = RecipeSandbox(undefined=jinja2.StrictUndefined, keep_trailing_newline=False,
                        autoescape=False)
    env.globals.clear()
    env.filters = {name: _bounded(name, env.filters[name]) for name in FILTERS}
    env.filters["replace"], env.filters["join"] = _replace, _join
    return env


def check_templates(recipe: Recipe, source: str) -> None:
    """Syntax errors and unknown filters in any template are reported at load time."""
    env = environment()
    for where, text in templates(recipe):
        try:
            jinja2.meta.find_undeclared_variables(_parse(env, text))  # compiles: finds filters
        except jinja2.TemplateAssertionError as exc:  # an unknown filter or test
            raise RecipeError(f"{source}: field '{where}': template error: {exc.message}; "
                              f"filters allowed: {', '.join(FILTERS)}") from None
        except jinja2.TemplateSyntaxError as exc:
            raise RecipeError(f"{source}: field '{where}': template error: {exc.message}") from None


def templates(recipe: Recipe) -> list[tuple[str, str]]:
    items = [(f"serve.args[{i}]", a) for i, a in enumerate(recipe.serve.args)]
    items += [(f"serve.command[{i}]", a) for i, a in enumerate(recipe.serve.command)]
    items += [(f"env.{k}", str(v)) for k, v in recipe.env.items()]
    items += [(f"container.ports[{i}]", p) for i, p in enumerate(recipe.container.ports)]
    items += [(f"container.volumes[{i}]", v) for i, v in enumerate(recipe.container.volumes)]
    items += [("health.port", recipe.health.port), ("health.path", recipe.health.path)]
    items += [("image", recipe.image)] if recipe.image else []
    if recipe.build:
        items += [("build.spec" if recipe.build.spec else "build.lock",
                   str(recipe.build.spec or recipe.build.lock))]
    return items


def placeholders(recipe: Recipe) -> set[str]:
    """Every name the recipe's templates read (a --set may supply one that has no default)."""
    env = environment()
    names: set[str] = set()
    for _, text in templates(recipe):
        names |= jinja2.meta.find_undeclared_variables(_parse(env, text))
    return names


def render_text(text: str, values: dict[str, object], where: str, source: str) -> str:
    try:
        env = environment()
        out = env.from_string(_parse(env, text)).render(_plain(values))
    except jinja2.UndefinedError as exc:
        name = re.search(r"'([^']+)' is undefined", str(exc))
        key = name.group(1) if name else str(exc)
        raise RecipeError(f"{source}: field '{where}': placeholder '{key}' is not defined; add it "
                          f"under defaults or pass --set {key}=VALUE") from None
    except jinja2.sandbox.SecurityError as exc:
        raise RecipeError(f"{source}: field '{where}': not allowed in a recipe template ({exc}); "
                          "templates read plain names and the filters "
                          f"{', '.join(FILTERS)}") from None
    except (jinja2.TemplateError, TypeError, ValueError, OverflowError, ArithmeticError,
            RecursionError, MemoryError) as exc:
        raise RecipeError(f"{source}: field '{where}': template error: {exc}") from None
    if len(out) > _MAX_TEXT:
        raise RecipeError(f"{source}: field '{where}': renders to {len(out)} characters (at most "
                          f"{_MAX_TEXT}); shorten the template")
    return out


def _plain(values: dict[str, object]) -> dict[str, object]:
    """Only plain data reaches a template: anything else is its text."""
    plain = (str, int, float, bool, type(None))
    return {k: v if isinstance(v, plain) else str(v) for k, v in values.items()}
