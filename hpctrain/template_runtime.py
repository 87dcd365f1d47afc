"""The few pieces of Jinja's runtime that hpctrain's compiled templates call, so that a render
from precompiled templates (precompiled.py) does not import Jinja: its import is a quarter of a
warm `hpctrain render` (the lexer, parser, compiler and their imports, none of which a compiled
template needs).

Only what the code Jinja generates for hpctrain's own templates uses, and with Jinja's meaning
(runtime.py and environment.py of Jinja 3.1): variable lookup in a context, attribute and item
access falling back on each other, StrictUndefined, {% include %}, {% from ... import %} of
macros, plain macros, for-loops with `loop`, {% set %} blocks without autoescape, and the filters
and tests the templates name. Anything else (blocks and inheritance, a macro with caller or
*args, a recursive loop, autoescape, a filter or test not listed here) raises NotSupported or
an error, and the caller (render.py) then renders with Jinja itself: a shortcut that is not
taken costs time, never a different script. The names at the end are exactly the ones a
compiled template imports from jinja2.runtime (precompiled.py checks that line).
"""
from __future__ import annotations


class TemplateError(Exception):
    """Any failure of a template here; render.py renders with Jinja instead."""


class NotSupported(TemplateError):
    """A construct this runtime does not do."""


class UndefinedError(TemplateError):
    pass


TemplateRuntimeError = TemplateNotFound = TemplateError


class _Missing:
    __slots__ = ()

    def __repr__(self):
        return "missing"


missing = _Missing()


class Undefined:
    """Jinja's lenient Undefined: what an inline `x if y` without else gives when y is false."""
    __slots__ = ("_hint", "_name")

    def __init__(self, hint=None, obj=missing, name=None, exc=None):
        self._hint, self._name = hint, name

    def _fail(self, *args, **kwargs):
        raise UndefinedError(self._hint or f"{self._name!r} is undefined")

    def __getattr__(self, name):
        if name[:2] == "__":
            raise AttributeError(name)
        return self._fail()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _fail
    __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pos__ = __neg__ = _fail
    __call__ = __getitem__ = __lt__ = __le__ = __gt__ = __ge__ = __int__ = __float__ = _fail
    __complex__ = __pow__ = __rpow__ = _fail

    def __eq__(self, other):
        return type(self) is type(other)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return id(type(self))

    def __str__(self):
        return ""

    def __len__(self):
        return 0

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __repr__(self):
        return "Undefined"


class StrictUndefined(Undefined):
    """The environment's undefined (render.py: a typo in a template is an error): every use fails."""
    __slots__ = ()
    __iter__ = __str__ = __len__ = Undefined._fail
    __eq__ = __ne__ = __bool__ = __hash__ = __contains__ = Undefined._fail


def identity(x):
    return x


def internalcode(f):
    return f


def str_join(seq):
    return "".join(map(str, seq))


def _autoescaped(*args, **kwargs):
    raise NotSupported("autoescape")


Markup = escape = markup_join = _autoescaped


class Namespace:
    def __init__(*args, **kwargs):
        raise NotSupported("namespace()")


class TemplateReference:
    def __init__(self, context):
        raise NotSupported("self")


class _EvalContext:
    autoescape = False
    volatile = False


class LoopContext:
    """Jinja's LoopContext (not recursive): the `loop` of a for-loop."""
    index0 = -1
    _length = None
    _after = _current = _before = _last_changed_value = missing

    def __init__(self, iterable, undefined, recurse=None, depth0=0):
        if recurse is not None:
            raise NotSupported("recursive loop")
        self._iterable, self._iterator = iterable, iter(iterable)
        self._undefined, self.depth0 = undefined, depth0

    @property
    def length(self):
        if self._length is None:
            try:
                self._length = len(self._iterable)
            except TypeError:
                rest = list(self._iterator)
                self._iterator = iter(rest)
                self._length = len(rest) + self.index + (self._after is not missing)
        return self._length

    def __len__(self):
        return self.length

    depth = property(lambda self: self.depth0 + 1)
    index = property(lambda self: self.index0 + 1)
    revindex0 = property(lambda self: self.length - self.index)
    revindex = property(lambda self: self.length - self.index0)
    first = property(lambda self: self.index0 == 0)

    def _peek_next(self):
        if self._after is missing:
            self._after = next(self._iterator, missing)
        return self._after

    @property
    def last(self):
        return self._peek_next() is missing

    @property
    def previtem(self):
        return self._undefined("there is no previous item") if self.first else self._before

    @property
    def nextitem(self):
        rv = self._peek_next()
        return self._undefined("there is no next item") if rv is missing else rv

    def cycle(self, *args):
        if not args:
            raise TypeError("no items for cycling given")
        return args[self.index0 % len(args)]

    def changed(self, *value):
        if self._last_changed_value != value:
            self._last_changed_value = value
            return True
        return False

    def __iter__(self):
        return self

    def __next__(self):
        if self._after is not missing:
            rv, self._after = self._after, missing
        else:
            rv = next(self._iterator)
        self.index0 += 1
        self._before, self._current = self._current, rv
        return rv, self

    def __call__(self, iterable):
        raise NotSupported("recursive loop")


class Macro:
    """A macro without caller, *varargs or **kwargs, called as Jinja calls one."""

    def __init__(self, environment, func, name, arguments, catch_kwargs, catch_varargs, caller,
                 default_autoescape=None):
        if catch_kwargs or catch_varargs or caller or default_autoescape:
            raise NotSupported(f"macro {name!r} with caller, varargs, kwargs or autoescape")
        self._func, self.name, self.arguments = func, name, arguments

    def __call__(self, *args, **kwargs):
        count = len(self.arguments)
        arguments = list(args[:count])
        for name in self.arguments[len(arguments):]:
            arguments.append(kwargs.pop(name, missing))
        if kwargs:
            raise TypeError(f"macro {self.name!r} takes no keyword argument {next(iter(kwargs))!r}")
        if len(args) > count:
            raise TypeError(f"macro {self.name!r} takes not more than {count} argument(s)")
        return self._func(*arguments)


class Context:
    __slots__ = ("parent", "vars", "exported_vars", "name", "environment")
    eval_ctx = _EvalContext

    def __init__(self, environment, parent: dict, name: str):
        self.environment, self.parent, self.name = environment, parent, name
        self.vars: dict = {}
        self.exported_vars: set = set()

    def resolve_or_missing(self, key):
        if key in self.vars:
            return self.vars[key]
        if key in self.parent:
            return self.parent[key]
        return missing

    def get_all(self) -> dict:
        if not self.vars:
            return self.parent
        if not self.parent:
            return self.vars
        return dict(self.parent, **self.vars)

    def call(*args, **kwargs):
        # Nothing the templates call takes the context (Jinja's pass_context): methods of the
        # plan's values, macros, and the filters above.
        self, obj, *args = args
        if hasattr(obj, "jinja_pass_arg") or hasattr(getattr(obj, "__call__", None), "jinja_pass_arg"):
            raise NotSupported("a callable that takes the context")
        kwargs.pop("_block_vars", None)
        kwargs.pop("_loop_vars", None)
        try:
            return obj(*args, **kwargs)
        except StopIteration:
            return self.environment.undefined("value was undefined because a callable raised a "
                                              "StopIteration exception")


class TemplateModule:
    """What {% from "x" import y %} takes names from: the template's exported {% set %} and macros."""

    def __init__(self, template, context):
        self._body_stream = list(template.root_render_func(context))
        self.__dict__.update({k: context.vars[k] for k in context.exported_vars})
        self.__name__ = template.name


class Template:
    def __init__(self, environment, name: str, code):
        namespace = dict(RUNTIME, environment=environment, __file__=code.co_filename)
        exec(code, namespace)
        if namespace["blocks"]:
            raise NotSupported("blocks")
        self.environment, self.name = environment, name
        self.root_render_func = namespace["root"]
        self._module = None

    def new_context(self, vars=None, shared=False, locals=None) -> Context:
        vars = {} if vars is None else vars
        parent = vars if shared else dict(self.environment.globals, **vars)
        if locals:
            if shared:
                parent = dict(parent)
            for key, value in locals.items():
                if value is not missing:
                    parent[key] = value
        return Context(self.environment, parent, self.name)

    def _get_default_module(self, ctx=None) -> TemplateModule:
        # Jinja makes a fresh module only for globals the importing context has and the
        # template has not; here both have the environment's, so the one module serves.
        if self._module is None:
            self._module = TemplateModule(self, self.new_context())
        return self._module

    def render(self, **values) -> str:
        return "".join(self.root_render_func(self.new_context(values)))


def _join(eval_ctx, value, d="", attribute=None):
    if attribute is not None:
        raise NotSupported("join(attribute=...)")
    return str(d).join(map(str, value))


class Environment:
    """Templates from compiled code (name -> code object), with Jinja's lookup rules."""
    undefined = StrictUndefined
    concat = "".join
    # Jinja's default globals that need nothing of Jinja; lipsum, cycler, joiner and namespace
    # are left out: a template that uses one fails here and is rendered by Jinja.
    globals = {"range": range, "dict": dict}
    tests = {"none": lambda v: v is None, "defined": lambda v: not isinstance(v, Undefined),
             "undefined": lambda v: isinstance(v, Undefined)}

    def __init__(self, code: dict, filters: dict):
        self._code, self._templates = code, {}
        self.filters = dict(filters, join=_join)

    def get_template(self, name: str, parent=None) -> Template:
        template = self._templates.get(name)
        if template is None:
            if name not in self._code:
                raise TemplateNotFound(name)
            template = self._templates[name] = Template(self, name, self._code[name])
        return template

    def getattr(self, obj, attribute):
        try:
            return getattr(obj, attribute)
        except AttributeError:
            pass
        try:
            return obj[attribute]
        except (TypeError, LookupError, AttributeError):
            return self.undefined(obj=obj, name=attribute)

    def getitem(self, obj, argument):
        try:
            return obj[argument]
        except (AttributeError, TypeError, LookupError):
            if isinstance(argument, str):
                try:
                    return getattr(obj, argument)
                except AttributeError:
                    pass
            return self.undefined(obj=obj, name=argument)


# Exactly the names of the import line that opens every compiled template.
RUNTIME = {name: globals()[name] for name in (
    "LoopContext", "Macro", "Markup", "Namespace", "TemplateNotFound", "TemplateReference",
    "TemplateRuntimeError", "Undefined", "escape", "identity", "internalcode", "markup_join",
    "missing", "str_join")}
