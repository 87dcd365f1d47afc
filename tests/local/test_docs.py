"""The manual cannot drift from the code.

Every code block of docs/*.md and README.md is checked by what it is:

- a `yaml` block is a job file or a site profile, and its title says which: `job.yaml` or any
  other `NAME.yaml` (a job, written into the page's working directory for the commands after it),
  `examples/...` (a job that must also say what that file says), `~/.config/hpctrain/sites/NAME.yaml`
  (a site profile), `in job.yaml` / `in a site profile` (a fragment, checked inside a minimal job
  or profile). Each one goes through `hpctrain validate`.
- a `bash` block without a title runs, line by line, in a fresh directory with the examples and
  a private home (`RUN` stands for the newest run); every line must exit 0. A `bash` block that
  cannot run here says where it runs in its title (`title="on a cluster login node"`): its
  `hpctrain` command lines are parsed by the real argument parser instead, so a flag that no
  longer exists fails here too. That set is kept small (TITLED_SHELL_BLOCKS).
- a `console` block is a transcript: without a title each `$ command` runs and must print exactly
  the lines shown under it; with a title (a cluster's output) its commands are parsed.
- a `python` block must compile, and every `hpctrain.NAME` it uses must exist.

Then the site is built with `mkdocs build --strict`, and scripts/docs-screens.py --check
compares the captured screens with what the commands print now.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md")) + [ROOT / "README.md"]
# The shell blocks that cannot run on this machine (a cluster, a laptop, an install), by page:
# this set stays small; a new one is a decision, made here.
TITLED_SHELL_BLOCKS = {
    "getting-started.md": 2, "first-hour.md": 2, "libraries.md": 1, "slurm-releases.md": 1, "never-lose-work.md": 1, "performance.md": 1,
    "workstations.md": 3, "remote.md": 1, "search.md": 2, "architecture.md": 1, "testing.md": 2,
    "rest.md": 1, "export.md": 2, "pull.md": 1,
}
# Lines the docs test must not run even when a block forgot its title: installs, the suite itself.
NEVER_RUN = re.compile(r"(^|[\s;&|])((\S*/)?pip3?|python3? -m venv|bash scripts/|(\S*/)?python3? -m pytest|pytest)\b")
SECRET_FOR_VALIDATE = {"WANDB_API_KEY": "docs-test-not-a-key"}

FENCE = re.compile(r"^(?P<fence>`{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                   re.M | re.S)


class Block:
    def __init__(self, page: Path, match: re.Match):
        info = match.group("info").strip()
        self.page, self.lang = page, (info.split() or [""])[0]
        title = re.search(r'title="([^"]*)"', info)
        self.title = title.group(1) if title else None
        self.body = match.group("body")
        self.line = match.string.count("\n", 0, match.start()) + 1

    def __repr__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} ({self.lang} {self.title or ''})"


def blocks(page: Path) -> list[Block]:
    return [Block(page, m) for m in FENCE.finditer(page.read_text())]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


# ---------------------------------------------------------------------------- running commands

class Workdir:
    """A fresh directory with the examples, a private home and index: the user's shell."""

    def __init__(self, tmp: Path):
        self.path = tmp / "work"
        shutil.copytree(ROOT / "examples", self.path / "examples")
        self.home = tmp / "home"
        self.home.mkdir()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("HPCTRAIN_", "XDG_", "WANDB_"))}
        env.update(HOME=str(self.home), COLUMNS="80",
                   PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
        self.env = env

    def run(self, command: str, timeout: float = 300) -> subprocess.CompletedProcess:
        if re.search(r"\bRUN\b", command):
            command = re.sub(r"\bRUN\b", self.newest_run(), command)
        return subprocess.run(["bash", "-c", command], cwd=self.path, env=self.env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)

    def newest_run(self) -> str:
        proc = subprocess.run([sys.executable, "-m", "hpctrain", "list", "--json"], cwd=self.path,
                              env=self.env, capture_output=True, text=True, timeout=60)
        runs = json.loads(proc.stdout or "[]")
        assert runs, f"a block says RUN before any run was submitted: {proc.stderr}"
        return runs[0]["run_id"]

    def shown(self, text: str) -> str:
        """Output as the page shows it: paths under the working directory and home shortened."""
        text = text.replace(str(self.path) + "/", "").replace(str(self.path), ".")
        return text.replace(str(self.home), "~")

    def validate(self, path: Path, site: str | None) -> subprocess.CompletedProcess:
        args = [sys.executable, "-m", "hpctrain", "validate", str(path)]
        if site:
            args += ["--site", site]
        return subprocess.run(args, cwd=self.path, env=dict(self.env, **SECRET_FOR_VALIDATE),
                              capture_output=True, text=True, timeout=60)


def commands_of(line: str) -> list[list[str]]:
    """The hpctrain invocations of one shell line: words up to a pipe, ;, && or a redirection."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split, lexer.commenters = True, "#"
    out, current = [], None
    for word in lexer:
        if set(word) <= set(";&|<>"):
            current = None
            continue
        if current is None:
            current = []
            out.append(current)
        current.append(word)
    return [c[1:] for c in out if c and (c[0] == "hpctrain" or c[0].endswith("/hpctrain"))]


def parse_hpctrain(argv: list[str], where) -> None:
    from hpctrain.cli import build_parser
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            pytest.fail(f"{where}: `hpctrain {shlex.join(argv)}` is not a valid command line")


def shell_lines(body: str) -> list[str]:
    """Lines of a shell block, continuation lines joined, comments and blanks left out."""
    lines, current = [], ""
    for raw in body.splitlines():
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        line = (current + raw).strip()
        current = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def transcript(body: str) -> list[tuple[str, str]]:
    """A console block's (command, output) pairs."""
    pairs: list[tuple[str, list[str]]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            command = lines[i][2:]
            while command.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command.rstrip()[:-1] + " " + lines[i].strip()
            pairs.append((command, []))
        elif pairs:
            pairs[-1][1].append(lines[i])
        i += 1
    return [(c, "\n".join(out).rstrip()) for c, out in pairs]


# ---------------------------------------------------------------------------- yaml blocks

FRAGMENT_JOB = {"name": "docs-fragment"}
FRAGMENT_SITE = {"name": "docs-fragment-site", "scheduler": "slurm"}
MINIMAL_JOB = {"name": "docs-site-check", "script": "examples/cartpole_ppo.py"}


def check_yaml(block: Block, work: Workdir, used_by_console: set[str]) -> None:
    title = block.title
    assert title, f"{block}: a yaml block must say what it is in its title (see tests/local/test_docs.py)"
    data = yaml.safe_load(block.body)
    assert isinstance(data, dict), f"{block}: not a mapping"
    checks = work.path.parent / "checks"
    checks.mkdir(exist_ok=True)
    if title.startswith("~/.config/hpctrain/sites/") or title == "in a site profile":
        site = data if title != "in a site profile" else dict(FRAGMENT_SITE, **data)
        name = site.get("name", "")
        profile = checks / f"{name}.yaml"
        profile.write_text(yaml.safe_dump(site) if title == "in a site profile" else block.body)
        if title != "in a site profile":
            assert title.endswith(f"/{name}.yaml"), f"{block}: the profile's name is {name!r}"
            # The commands after it on the page find it by name, as the user's would.
            sites = work.home / ".config" / "hpctrain" / "sites"
            sites.mkdir(parents=True, exist_ok=True)
            shutil.copy(profile, sites / profile.name)
        job = checks / "minimal-job.yaml"
        job.write_text(yaml.safe_dump(MINIMAL_JOB))
        proc = work.validate(job, str(profile))
        assert proc.returncode == 0, f"{block}: the site profile does not load:\n{proc.stderr}"
        return
    if title == "in job.yaml":
        job = checks / f"fragment-{block.line}.yaml"
        base = FRAGMENT_JOB if "library" in data else dict(FRAGMENT_JOB, script="examples/cartpole_ppo.py")
        job.write_text(yaml.safe_dump(dict(base, **data)))
    else:
        assert title.endswith(".yaml") and " " not in title, f"{block}: unknown title {title!r}"
        if title.startswith("examples/"):
            assert data == yaml.safe_load((ROOT / title).read_text()), \
                f"{block}: the block is not what {title} says"
        job = work.path / title
        job.parent.mkdir(parents=True, exist_ok=True)
        job.write_text(block.body)
        if title in used_by_console:
            return  # a transcript on this page shows what validate says about it
    proc = work.validate(job, None if "site" in data else "slurm-generic")
    assert proc.returncode == 0, f"{block}: hpctrain validate refuses it:\n{proc.stderr}"


# ---------------------------------------------------------------------------- the tests

@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_page_blocks(page, tmp_path):
    """Each page in order: its job files and profiles validate, its commands run, its
    transcripts print what they show."""
    work = Workdir(tmp_path)
    found = blocks(page)
    readme = page.name == "README.md"
    consoles = [b for b in found if b.lang == "console" and not b.title and not readme]
    used = {w for b in consoles for c, _ in transcript(b.body) for w in shlex.split(c)
            if w.endswith(".yaml")}
    titled = 0
    for block in found:
        if block.lang == "yaml":
            if readme:  # the README's taste: a job file with its name in a comment
                assert block.body.startswith("# job.yaml\n"), block
                block.title = "job.yaml"
            check_yaml(block, work, used)
        elif block.lang in ("bash", "sh", "shell"):
            assert block.lang == "bash", f"{block}: shell blocks are `bash`"
            if block.title or readme:
                titled += bool(block.title)
                for line in shell_lines(block.body):
                    for argv in commands_of(line):
                        parse_hpctrain(argv, block)
                continue
            for line in shell_lines(block.body):
                assert not NEVER_RUN.search(line), \
                    f"{block}: `{line}` installs or runs the test suite: title the block with where it runs"
                proc = work.run(line)
                assert proc.returncode == 0, f"{block}: `{line}` exited {proc.returncode}:\n{proc.stdout}"
        elif block.lang == "console":
            for command, expected in transcript(block.body):
                for argv in commands_of(command):
                    parse_hpctrain(argv, block)
                if block.title or readme:
                    continue
                proc = work.run(command)
                got = "\n".join(line.rstrip() for line in work.shown(proc.stdout).splitlines())
                assert got == expected, f"{block}: `{command}` printed\n{got}\ninstead of\n{expected}"
        elif block.lang == "python":
            tree = compile(block.body, str(block), "exec", ast.PyCF_ONLY_AST)
            import hpctrain
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "hpctrain":
                    assert hasattr(hpctrain, node.attr), f"{block}: hpctrain.{node.attr} does not exist"
        else:
            assert block.lang in ("text", ""), f"{block}: unknown block language {block.lang!r}"
    if not readme:
        key = str(page.relative_to(DOCS))
        assert titled == TITLED_SHELL_BLOCKS.get(key, 0), \
            f"{key}: {titled} shell block(s) not run here; TITLED_SHELL_BLOCKS says {TITLED_SHELL_BLOCKS.get(key, 0)}"


def test_commands_of_finds_every_invocation():
    """The checker itself: a line's hpctrain commands, pipes, redirections and comments aside."""
    assert commands_of("hpctrain logs -f RUN; hpctrain status RUN | cat > x  # comment") == \
        [["logs", "-f", "RUN"], ["status", "RUN"]]
    assert commands_of(".venv/bin/pip install x && .venv/bin/hpctrain submit a.yaml --wait") == \
        [["submit", "a.yaml", "--wait"]]
    with pytest.raises(pytest.fail.Exception):
        parse_hpctrain(["submit", "job.yaml", "--no-such-flag"], "here")


def test_mkdocs_build_strict(tmp_path):
    """The site builds with no warning: every page in the nav, every link and anchor found."""
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "reference" / "job" / "index.html").exists()


def test_screens_match_what_the_commands_print_now(tmp_path):
    """The status screens and images in the manual come from scripts/docs-screens.py, which
    runs the example again and compares."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs-screens.py"), "--check",
                           "--workdir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_readme_links_reach_files():
    """The README is read on GitHub and PyPI, outside the site: its links must reach files."""
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links
    missing = [link for link in links if not link.startswith(("http://", "https://"))
               and not (ROOT / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


# What the troubleshooting page quotes from inside a job (not runnable here): each fixed part
# must still be in the page and in the code that prints it.
JOB_MESSAGES = ["resolves to loopback", "did not reach the head", "(preflight_timeout)",
                "did not reach the rank check within", "(launcher.preflight_timeout)",
                "failed (site '", "the module system's message is above",
                "no rank has progressed for", "(launcher.hang_timeout)",
                "hpctrain failed unexpectedly"]


def test_troubleshooting_quotes_messages_the_code_prints():
    page = (DOCS / "troubleshooting.md").read_text()
    code = "\n".join(p.read_text() for folder in ("hpctrain", "templates")
                     for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".j2"))
    for fragment in JOB_MESSAGES:
        assert fragment in page, f"troubleshooting.md no longer quotes {fragment!r}"
        assert fragment in code, f"troubleshooting.md quotes {fragment!r}, which the code no longer prints"


# Paths the manual names that are not this repository's: Isaac Lab's, the system's, placeholders.
NOT_OURS = ("/etc/", "docker/cluster/", "scripts/reinforcement_learning/", "RUN_DIR/", "~/")
PATH_IN_CODE = re.compile(r"`([A-Za-z0-9_~$<>./-]*/[A-Za-z0-9_<>.-]*\.(?:py|sh|yaml|md|j2|ipynb|png|txt))`")


def test_paths_the_manual_names_exist():
    """A file the manual points at (`rank/before/probe.py`, `tests/unit/test_layout.py`, an example)
    exists, in the repository or in the package: a move or a rename shows here."""
    missing = []
    for page in PAGES:
        for path in PATH_IN_CODE.findall(page.read_text()):
            if path.startswith(NOT_OURS) or "<" in path:
                continue
            if not ((ROOT / path).exists() or (ROOT / "hpctrain" / path).exists()):
                missing.append(f"{page_id(page)}: {path}")
    assert not missing, "the manual names files that do not exist:\n" + "\n".join(missing)
