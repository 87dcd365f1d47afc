"""Templates precompiled to Python and rendered without Jinja (hpctrain/precompiled.py,
hpctrain/template_runtime.py) must give exactly Jinja's script, never a stale one, and fall back
to Jinja for anything the small runtime does not do."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from importlib import import_module
from hpctrain.precompiled import Store
from hpctrain.submission import prepare
from hpctrain.template_runtime import Environment, TemplateError
from tests.unit.test_render import MATRIX, job_for, site_dir  # noqa: F401 - the fixture

R = import_module("hpctrain.render")  # the module (hpctrain.render is also the API function)

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = repr(sorted(R.OPTIONS.items()))


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """render.py as in a new process, with a private cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("_env", "_store", "_fast"):
        monkeypatch.setattr(R, name, None)
    return tmp_path / "cache" / "hpctrain" / "templates"


def use_templates(monkeypatch, folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    monkeypatch.setattr(R, "TEMPLATES", folder)


def compiled(folder=R.TEMPLATES) -> dict:
    store = Store(folder, OPTIONS)
    from hpctrain.precompiled import compile_template
    return {name: compile_template(R.environment(), name, raw.decode(), str(folder / name))
            for name, raw in store.sources.items()}


def test_every_case_renders_as_jinja_renders(site_dir, home, monkeypatch):  # noqa: F811
    """Every golden case, and every template call it makes, through both; byte for byte."""
    calls = []
    real = R.render_template
    monkeypatch.setattr(R, "render_template",
                        lambda name, **values: calls.append((name, values)) or real(name, **values))
    for site, extra in MATRIX.values():
        prep = prepare(job_for(site, extra), run_id="RUN_ID")
        for task in prep.tasks:  # a sweep: every task's script too
            task.script
    from hpctrain.backends.submitit import batch_prelude
    batch_prelude(prep.plan)  # submitit's parts, rendered alone
    assert len({name for name, _ in calls}) >= 6
    fast = Environment(compiled(), R.FILTERS)
    for name, values in calls:
        want = R.environment().get_template(name).render(**values)
        assert fast.get_template(name).render(**values) == want, name


def test_kept_and_used_without_importing_jinja(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nscript: train.py\nsite: slurm-generic\nresources: {nodes: 2}\n")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    code = ("import sys; from hpctrain.cli import main; main(['render', sys.argv[1]]); "
            "print('JINJA' if 'jinja2' in sys.modules else 'NO-JINJA', file=sys.stderr)")
    runs = [subprocess.run([sys.executable, "-c", code, str(job)], capture_output=True,
                           text=True, env=env, cwd=tmp_path, check=True) for _ in range(2)]
    assert "JINJA" in runs[0].stderr.split() and "NO-JINJA" in runs[1].stderr.split()
    assert runs[0].stdout == runs[1].stdout and "--nodes=2" in runs[0].stdout
    assert len(list((tmp_path / "cache" / "hpctrain" / "templates").iterdir())) == 1


def test_edited_template_is_never_stale(fresh, monkeypatch, tmp_path):
    folder = tmp_path / "t"
    use_templates(monkeypatch, folder, {"x/a.j2": "A{{ plan }}{% include 'x/b.j2' %}\n",
                                        "x/b.j2": "B\n"})
    assert R.render_template("x/a.j2", plan=1) == "A1B\n"
    assert Store(folder, OPTIONS).code is not None  # kept
    (folder / "x/b.j2").write_text("C\n")  # an included template, same size
    assert Store(folder, OPTIONS).code is None
    monkeypatch.setattr(R, "_store", None)
    monkeypatch.setattr(R, "_fast", None)
    monkeypatch.setattr(R, "_env", None)
    assert R.render_template("x/a.j2", plan=1) == "A1C\n"
    assert Store(folder, OPTIONS).code is not None
    assert Store(folder, OPTIONS + "x").code is None  # other options: other code


def test_corrupt_or_foreign_entry_is_ignored(fresh, monkeypatch, tmp_path):
    folder = tmp_path / "t"
    use_templates(monkeypatch, folder, {"a.j2": "{{ plan | q }}\n"})
    assert R.render_template("a.j2", plan="x y") == "'x y'\n"
    (entry,) = fresh.iterdir()
    for junk in (b"", b"\x00garbage", entry.read_bytes()[:50]):
        entry.write_bytes(junk)
        assert Store(folder, OPTIONS).code is None
    import marshal
    entry.write_bytes(marshal.dumps(("0" * 64, {})))  # another digest
    assert Store(folder, OPTIONS).code is None
    monkeypatch.setattr(R, "_store", None)
    assert R.render_template("a.j2", plan="x y") == "'x y'\n"


def test_no_cache_directory_renders_with_jinja(fresh, monkeypatch, tmp_path):
    monkeypatch.setattr("hpctrain.datafiles.user_cache", lambda name: None)
    folder = tmp_path / "t"
    use_templates(monkeypatch, folder, {"a.j2": "{{ plan }}\n"})
    assert R.render_template("a.j2", plan=3) == "3\n"
    assert R._fast is None and not fresh.exists()


@pytest.mark.parametrize("text", [
    "{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}x{% endcall %}\n",
    "{% set ns = namespace(a=1) %}{% set ns.a = 2 %}{{ ns.a }}\n",
    "{% for i in [3, [4]] recursive %}{{ i }}{% if i is iterable %}{{ loop(i) }}{% endif %}{% endfor %}\n",
    "{{ [1, 2] | join(', ') }} {{ ['a'] | map('upper') | join }} {{ plan | default('d') }}\n",
    "{% block b %}x{% endblock %}\n",
    "{{ lipsum(1)[:0] }}{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.revindex }}{{ loop.last }}"
    "{{ loop.cycle('a', 'b') }}{% endfor %}{{ 'x' if false }}{{ range(3) | list }}\n",
])
def test_what_the_runtime_does_not_do_jinja_renders(fresh, monkeypatch, tmp_path, text):
    folder = tmp_path / "t"
    use_templates(monkeypatch, folder, {"a.j2": text})
    want = R.environment().get_template("a.j2").render(plan=None)
    for _ in range(2):  # built, then precompiled or not
        assert R.render_template("a.j2", plan=None) == want
        monkeypatch.setattr(R, "_store", None)


SUPPORTED = {
    "a.j2": "{% from 'm.j2' import m, n %}{% set s %}<{{ m(1) }}|{{ m(2, b='y') }}|{{ n() }}>{% endset %}"
            "{% for k, v in plan.env.items() %}{{ loop.index }}/{{ loop.length }}/{{ loop.revindex }}"
            "{{ loop.first }}{{ loop.last }}{{ loop.cycle('a', 'b') }}{{ loop.changed(v) }}"
            "{% if not loop.first %}{{ loop.previtem }}{% endif %}{{ k }}={{ v | q }}\n"
            "{% include 'i.j2' %}{% endfor %}{{ s }} {{ plan.env.A }} {{ plan['name'] }} "
            "{{ plan.names | join(',') }} {{ plan.x is none }} {{ plan.nope is defined }} "
            "{{ 'y' if plan.x }}{{ plan.names[1] }}{{ range(2) | join }}{{ plan.n // 2 }}\n",
    "m.j2": "{% macro m(a, b='x') -%}{{ a }}{{ b }}{%- endmacro %}{% macro n() %}N{% endmacro %}",
    "i.j2": "  [{{ k }} {{ plan.n }}]\n",
}


def test_runtime_renders_what_jinja_renders(fresh, monkeypatch, tmp_path):
    folder = tmp_path / "t"
    use_templates(monkeypatch, folder, SUPPORTED)

    class Plan:
        env = {"A": "1 2", "B": "1 2", "C": "x"}
        names = ["p", "q"]
        x = None
        n = 7

        def __getitem__(self, key):
            return {"name": "it"}[key]
    want = R.environment().get_template("a.j2").render(plan=Plan())
    fast = Environment(compiled(folder), R.FILTERS)
    assert fast.get_template("a.j2").render(plan=Plan()) == want
    assert "N" in want and "1/3/3TrueFalsea" in want and "[B 7]" in want


def test_undefined_is_an_error_in_both(fresh, monkeypatch, tmp_path):
    import jinja2
    folder = tmp_path / "t"
    use_templates(monkeypatch, folder, {"a.j2": "{{ plan.nope }}\n", "b.j2": "{{ plan }}\n"})
    with pytest.raises(jinja2.UndefinedError):
        R.render_template("a.j2", plan=1)
    assert R.render_template("b.j2", plan=1) == "1\n"  # builds the cache
    fast = Environment(Store(folder, OPTIONS).code, R.FILTERS)
    with pytest.raises(TemplateError):
        fast.get_template("a.j2").render(plan=1)
    for bad in ("{{ nope == 1 }}", "{% if nope %}{% endif %}", "{{ nope | q }}",
                "{% for x in nope %}{% endfor %}"):
        with pytest.raises(TemplateError):
            Environment({"c": _code(bad)}, R.FILTERS).get_template("c").render()
    with pytest.raises(jinja2.UndefinedError):  # through render_template: Jinja's own error
        R.render_template("a.j2", plan=1)


def _code(text: str):
    from hpctrain.precompiled import compile_template
    return compile_template(R.environment(), "c", text, "c")


def test_a_runtime_that_renders_differently_is_not_kept(fresh, monkeypatch, tmp_path):
    folder = tmp_path / "t"
    use_templates(monkeypatch, folder, {"a.j2": "{{ plan }}\n"})
    monkeypatch.setattr(R, "_same", lambda *args: False)
    assert R.render_template("a.j2", plan=1) == "1\n"
    store = Store(folder, OPTIONS)
    assert store.code is None and store.tried  # kept as "not precompiled": no build next time
    monkeypatch.setattr(R, "_store", None)
    monkeypatch.setattr("hpctrain.precompiled.compile_template",
                        lambda *a: pytest.fail("compiled again"))
    assert R.render_template("a.j2", plan=1) == "1\n" and R._fast is None
    (folder / "a.j2").write_text("{{ plan }}!\n")  # changed templates are tried again
    assert Store(folder, OPTIONS).tried is False


def test_two_template_folders_keep_two_entries(tmp_path):
    """The cache is keyed on the template folder's path: two copies keep two entries."""
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(R.TEMPLATES, a)
    shutil.copytree(R.TEMPLATES, b)
    assert Store(a, OPTIONS).path != Store(b, OPTIONS).path
    assert Store(a, OPTIONS).digest == Store(b, OPTIONS).digest
