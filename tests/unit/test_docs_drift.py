"""The documents name only what exists: every `slacker ...` command and its options in README.md and
docs/*.md is one the click CLI has, every bare `--option` is one of Slacker's (or a bench's or a
script's), every `slacker_*` metric is one the code exports, and every repository path or `slacker.*`
module they name is in the tree. Code blocks and inline code are read; prose is read for paths and
metrics only (there "slacker" is the project's name). An option's `--help` states the default the code
uses, and every image under docs/img is shown (or linked) by a page."""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest

from slacker.cli import main

REPO = Path(__file__).resolve().parents[2]
# The pages people read; docs/data/ holds the benches' raw output, which documents nothing.
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "results").glob("*.md"))]

# Flags of other programs that the docs name bare, in prose or inline code, outside a command line of
# that program. Each is here because the text is about that program, not about Slacker.
EXTERNAL_OPTIONS = {
    "--log-copy-interval",  # mariabackup/xtrabackup: the redo-log copier's poll, which Slacker sets (transfer.md)
    "--cert-file", "--key-file", "--trusted-ca-file",  # etcd's own TLS flags (deployment.md, "etcd")
    "--peer-cert-file", "--peer-key-file", "--peer-trusted-ca-file", "--peer-client-cert-auth",
}
# Command words that may follow `slacker` in text without being a subcommand (placeholders).
PLACEHOLDER = re.compile(r"^(<.*>|\.\.\.|[A-Z][A-Z_:]*|\{.*\}|…)$")
# TODO(lead): drift in pages other branches rewrite (docs/controller.md, deployment.md, configuration.md);
# each entry is (page, the name it uses). Remove an entry once the rewrite has fixed the page.
PENDING: set[tuple[str, str]] = set()

ROOTS = ("slacker", "bench", "tests", "scripts", "deploy", "docs", "router", "workloads")
PATH = re.compile(r"(?<![\w./~-])((?:%s)/[\w./*{},-]*)" % "|".join(ROOTS))
MODULE = re.compile(r"(?<![\w./-])slacker(?:\.[A-Za-z_]\w*)+")
METRIC = re.compile(r"(?<![\w./:-])slacker_[a-z0-9_]*[a-z0-9](?:_?\*)?")
OPTION = re.compile(r"(?<![\w/-])--[a-z][a-z0-9-]*")
# `slacker` as a command: at the start of a shell word, followed by a space or the end of the text.
# Not the user of `runuser -u slacker --` or `install -o slacker -g slacker`, nor `user: slacker` in a command's output.
COMMAND = re.compile(r"(?:^|(?<=[\s;&|($`]))(?<!-u )(?<!-o )(?<!-g )(?<!: )slacker(?=\s|$)")
GLOBAL_OPTIONS = ("--cluster", "--credential", "--debug")
# What a reader of the repository cannot open: this machine's paths, and files in git history only.
OUTSIDE = re.compile(r"(?<![\w.])/work/[\w./-]+|\bgit show [0-9a-f]{7,40}:[\w./-]+")
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
SHELL_END = re.compile(r"\s(?:\||\|\||&&|;|#|>|2>|<)\s.*$|[)]\s*$")


@dataclass
class Cli:
    """The click tree: each command path's options (with whether they take a value) and subcommands."""
    options: dict[tuple[str, ...], dict[str, bool]] = field(default_factory=dict)
    children: dict[tuple[str, ...], set[str]] = field(default_factory=dict)

    @classmethod
    def read(cls, group: click.Command) -> "Cli":
        cli, ctx = cls(), click.Context(group)

        def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
            cli.options[path] = {o: not (p.is_flag or p.count) for p in cmd.params if isinstance(p, click.Option)
                                 for o in p.opts + p.secondary_opts}
            cli.options[path]["--help"] = False
            cli.children[path] = set()
            if isinstance(cmd, click.Group):
                for name in cmd.list_commands(ctx):
                    cli.children[path].add(name)
                    walk(cmd.get_command(ctx, name), path + (name,))

        walk(group, ())
        return cli

    def all_options(self) -> set[str]:
        return {o for opts in self.options.values() for o in opts}

    def check(self, words: list[str]) -> list[str]:
        """What is wrong with one `slacker ...` command line (the words after `slacker`)."""
        path: tuple[str, ...] = ()
        wrong, i = [], 0
        while i < len(words):
            w = words[i].strip("[]()'\",")
            if not w:
                pass
            elif w.startswith("-"):
                name = w.split("=", 1)[0]
                # An option belongs to its own command's level, except the global ones (`--cluster`,
                # `--debug`), which the CLI also takes after the command.
                known = self.options[path].get(name)
                if known is None and name in GLOBAL_OPTIONS and name not in self.options[path]:
                    known = self.options[()].get(name)
                if known is None and not PLACEHOLDER.match(name.lstrip("-")):
                    wrong.append(f"slacker {' '.join(path)} has no option {name}".replace("  ", " "))
                elif known and "=" not in w:
                    i += 1  # its value
            elif self.children[path]:
                if w in self.children[path]:
                    path += (w,)
                elif PLACEHOLDER.match(w) or not re.match(r"^[a-z][a-z-]*$", w):
                    break
                else:
                    wrong.append(f"slacker {' '.join(path + (w,))}: no such command")
                    break
            i += 1
        return wrong


@dataclass
class Code:
    """One piece of code in a page: a fenced block's line or an inline span, and the line it is on."""
    text: str
    line: int
    fenced: bool


def code_of(text: str) -> tuple[list[Code], str]:
    """The code pieces of a page, and its prose (the page with the code taken out)."""
    out: list[Code] = []
    for m in FENCE.finditer(text):
        start = text.count("\n", 0, m.start(2)) + 1
        held: Code | None = None  # a shell line continued with a backslash is one line, at its first line
        for k, line in enumerate(m.group(2).split("\n")):
            held = Code(held.text + " " + line.strip(), held.line, True) if held else Code(line, start + k, True)
            if not line.rstrip().endswith("\\"):
                if held.text.strip():
                    out.append(held)
                held = None
            else:
                held = Code(held.text.rstrip()[:-1], held.line, True)
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for m in INLINE.finditer(prose):
        out.append(Code(m.group(1), prose.count("\n", 0, m.start()) + 1, False))
    return out, prose


def bench_and_script_options() -> set[str]:
    found: set[str] = set()
    for root in ("bench", "scripts"):
        for p in (REPO / root).rglob("*"):
            if p.is_file() and p.suffix in ("", ".py", ".sh") and "__pycache__" not in p.parts:
                try:
                    found |= set(re.findall(r"""["'\s(](--[a-z][a-z0-9-]*)""", p.read_text()))
                except UnicodeDecodeError:
                    continue
    return found


def code_metrics() -> set[str]:
    """Every series the code exports: each `slacker_*` string in slacker/ and router/ (metric names, and the
    few other names such as the replication account that the docs may mention too), with the suffixes the
    Prometheus client adds to them."""
    names: set[str] = set()
    for p in [*(REPO / "slacker").rglob("*.py"), *(REPO / "router").rglob("*.go")]:
        names |= set(re.findall(r"""["'](slacker_[a-z0-9_]+)["']""", p.read_text()))
    return {n + s for n in names for s in ("", "_total", "_bucket", "_sum", "_count", "_created", "_info")}


def path_exists(path: str) -> bool:
    path = re.sub(r"[A-Z]{3,}", "*", path.rstrip(".,:;"))  # bench/benches/NAME/main.py: a placeholder
    if re.search(r"[*{]", path):
        return any(REPO.glob(re.sub(r"\{[^}]*\}", "*", path)))
    return (REPO / path).exists() and not ignored(path)


@functools.lru_cache(maxsize=None)
def ignored(path: str) -> bool:
    """A file git ignores (bench/out/, .venv/) exists only on the machine that made it, not in a clean clone."""
    if not (REPO / ".git").exists():
        return False
    return subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", path], check=False).returncode == 0


def module_exists(dotted: str) -> bool:
    """`slacker.a.b` names a module, or a module and a name defined in it (`slacker.units.parse_rate`)."""
    parts = dotted.split(".")
    at = REPO
    for k, part in enumerate(parts):
        if (at / part).is_dir():
            at = at / part
        elif (at / f"{part}.py").is_file():
            rest = parts[k + 1:]
            return not rest or re.search(rf"\b{re.escape(rest[0])}\b", (at / f"{part}.py").read_text()) is not None
        else:
            init = at / "__init__.py"
            return at != REPO and init.is_file() and re.search(rf"\b{re.escape(part)}\b", init.read_text()) is not None
    return True


def drift(pages: list[Path], cli: Cli) -> list[str]:
    options = cli.all_options() | bench_and_script_options() | EXTERNAL_OPTIONS
    metrics = code_metrics()
    found: list[tuple[str, int, str]] = []
    for page in pages:
        rel = page.relative_to(REPO).as_posix() if page.is_relative_to(REPO) else page.name
        text = page.read_text()
        codes, prose = code_of(text)

        def say(line: int, what: str, name: str) -> None:
            if (rel, name) not in PENDING:
                found.append((rel, line, what))

        for c in codes:
            body = c.text
            commands = list(COMMAND.finditer(body))
            for m in commands:
                rest = SHELL_END.sub("", body[m.end():])
                for wrong in cli.check(rest.split()):
                    say(c.line, wrong, wrong)
            # A command written without its `slacker` (`node drain --sla 50ms`, `tenant create`): a top-level
            # command followed by one of its subcommands or an option (an output line's first words are not).
            words = body.split()
            if not commands and len(words) > 1 and words[0] in cli.children[()] and (
                    words[1] in cli.children[(words[0],)] or words[1].startswith("--")):
                for wrong in cli.check(SHELL_END.sub("", body).split()):
                    say(c.line, wrong, wrong)
                continue
            # Options outside a `slacker ...` command: Slacker's, a bench's or a script's if the piece is bare
            # options; another program's if the piece starts with that program's name.
            before = body[:commands[0].start()] if commands else body
            first = before.strip().split(" ", 1)[0] if before.strip() else ""
            if first and not first.startswith("-") and not first.startswith(("bench/", "scripts/")):
                continue
            for name in OPTION.findall(before):
                if name not in options:
                    say(c.line, f"no such option {name}", name)
        lines = text.split("\n")
        for k, line in enumerate(lines, 1):
            for m in PATH.finditer(line):
                if not path_exists(m.group(1)):
                    say(k, f"no such file {m.group(1).rstrip('.,:;')}", m.group(1).rstrip(".,:;"))
            for m in MODULE.finditer(line):
                if not module_exists(m.group(0)):
                    say(k, f"no such module or name {m.group(0)}", m.group(0))
            for m in METRIC.finditer(line):
                name = m.group(0)
                ok = (any(x.startswith(name.rstrip("*")) for x in metrics) if name.endswith("*")
                      else name in metrics)
                if not ok:
                    say(k, f"no such metric {name}", name)
            for m in OUTSIDE.finditer(line):
                say(k, f"points outside the repository: {m.group(0)}", m.group(0))
    return [f"{rel}:{line}: {what}" for rel, line, what in sorted(found, key=lambda f: f[:2])]


@pytest.fixture(scope="module")
def cli() -> Cli:
    return Cli.read(main)


def test_the_documents_name_only_what_exists(cli):
    assert drift(PAGES, cli) == []


def test_drift_is_found(cli, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Run `slacker migrate --to n2 --setpont 50ms t1` or `slacker tenant remove t1`.\n"
        "```sh\n"
        "slacker --cluster c.toml node drain node-1 \\\n"
        "    --sla 50ms --no-such-flag\n"
        "mariabackup --backup --made-up   # another program's flags are its own\n"
        "slacker status --json | jq .nodes\n"
        "slacker tenant list --cluster c.toml --json\n"
        "```\n"
        "Watch slacker_migration_phase and slacker_migration_warp_factor; see slacker/nothing.py,\n"
        "bench/benchkit/plant.py, tests/unit/plant.py and slacker.controller.nothing.\n"
        "Bare `--max-rate` is one of ours, `--frobnicate` is not; `node drain --slaa 5ms`.\n"
        "From /work/shared/notes.md and `git show 490c0e6:docs/old.md`; one per bench/benches/NAME/main.py.\n")
    assert drift([page], cli) == [
        "page.md:1: slacker migrate has no option --setpont",
        "page.md:1: slacker tenant remove: no such command",
        "page.md:3: slacker node drain has no option --no-such-flag",
        "page.md:9: no such file slacker/nothing.py",
        "page.md:9: no such metric slacker_migration_warp_factor",
        "page.md:10: no such file tests/unit/plant.py",
        "page.md:10: no such module or name slacker.controller.nothing",
        "page.md:11: no such option --frobnicate",
        "page.md:11: slacker node drain has no option --slaa",
        "page.md:12: no such file docs/old.md",
        "page.md:12: points outside the repository: /work/shared/notes.md",
        "page.md:12: points outside the repository: git show 490c0e6:docs/old.md",
    ]


# --- an option's stated default is the one the code uses ----------------------------------------------


def code_defaults() -> dict[tuple[tuple[str, ...], str], str | float]:
    """(command path, option) -> the default the code uses when the option is not given: the words its
    --help must show, or a duration in seconds. An option whose default is a plain value (`default=`)
    shows it by itself; these show a text (`show_default=`), which nothing else would check."""
    from slacker.controller.settings import DEFAULT_KIND
    from slacker.delta import DEFAULT_APPLIER, DEFAULT_MPL
    from slacker.latency import DEFAULT_STEP_S, DEFAULT_WINDOW_S, default_source_text
    from slacker.transfer import DEFAULT_PIPE

    return {
        (("migrate",), "--latency-source"): default_source_text(),
        (("migrate",), "--controller"): DEFAULT_KIND,
        (("migrate",), "--pipe"): DEFAULT_PIPE,
        (("migrate",), "--delta-applier"): DEFAULT_APPLIER,
        (("migrate",), "--delta-mpl"): DEFAULT_MPL,
        (("migrate",), "--window"): DEFAULT_WINDOW_S,
        (("migrate",), "--step"): DEFAULT_STEP_S,
    }


def default_drift(group: click.Command, expected: dict[tuple[tuple[str, ...], str], str | float]) -> list[str]:
    """Each option of `expected` whose --help shows another default than the code's."""
    from slacker.units import parse_duration

    ctx, wrong = click.Context(group), []
    for (path, name), want in sorted(expected.items()):
        cmd = group
        for word in path:
            cmd = cmd.get_command(ctx, word)
        opt = next(p for p in cmd.params if isinstance(p, click.Option) and name in p.opts)
        shown = opt.show_default if isinstance(opt.show_default, str) else opt.default
        if (parse_duration(shown) if isinstance(want, float) else shown) != want:
            wrong.append(f"slacker {' '.join(path)} {name}: --help says the default is {shown!r}, the code uses {want!r}")
    return wrong


def latency_rule() -> list[str]:
    """The default latency source as slacker.sources.router.LatencyChoice picks it, the sources in the order it
    tries them: what it reads for a tenant a router carries, then for a tenant no router carries."""
    from types import SimpleNamespace

    from slacker import throttle
    from slacker.latency import parse_latency_source_spec
    from slacker.sources import router

    carried = {"t-routed": ({"a:1": (50.0, 3)}, {}), "t-direct": ({"a:1": (0.0, 0)}, {})}
    choice = router.LatencyChoice(SimpleNamespace())
    choice.admins = lambda: ["a:1"]
    spec = parse_latency_source_spec(throttle.DEFAULT_SOURCES[0])
    real = router.router_traffic, router.pfs_maker
    router.router_traffic = lambda tenant, admins, kind: carried[tenant]
    router.pfs_maker = lambda tenant, spec, w, s: lambda: None
    try:
        for tenant in carried:
            choice.maker(SimpleNamespace(id=tenant), spec, 3.0, 1.0)()
    finally:
        router.router_traffic, router.pfs_maker = real
    return list(dict.fromkeys(choice.tenants[t]["source"] for t in carried))


def sources_named(text: str) -> list[str]:
    """The latency sources a text names, in the order it names them."""
    found = sorted((m.start(), "router" if m.group(0).startswith("router") else "performance_schema")
                   for m in re.finditer(r"router|performance[_-]schema", text))
    return list(dict.fromkeys(name for _, name in found))


def test_an_options_help_states_the_default_the_code_uses():
    assert default_drift(main, code_defaults()) == []
    # --latency-source: the rule LatencyChoice follows is DEFAULT_SOURCE_ORDER, and the help names the
    # sources in the order the rule tries them (issue 68: it named performance_schema alone).
    from slacker.latency import DEFAULT_SOURCE_ORDER
    rule = latency_rule()
    assert rule == [source for source, _, _ in DEFAULT_SOURCE_ORDER]
    opt = next(p for p in main.get_command(click.Context(main), "migrate").params if p.name == "latency_sources")
    assert sources_named(opt.show_default) == rule


def test_a_stated_default_the_code_does_not_use_is_found():
    @click.command()
    @click.option("--latency-source", show_default="per-transaction latency from performance_schema")
    @click.option("--pipe", default=None, show_default="pv")
    def cmd(latency_source, pipe):
        pass

    group = click.Group(commands={"migrate": cmd})
    assert default_drift(group, {(("migrate",), "--pipe"): "native"}) == [
        "slacker migrate --pipe: --help says the default is 'pv', the code uses 'native'"]
    assert sources_named(cmd.params[0].show_default) == ["performance_schema"] != latency_rule()


# --- every image under docs/img is shown by a page ------------------------------------------------------

IMAGE = re.compile(r"""!?\[[^\]]*\]\(([^)\s]+)|<img\b[^>]*\bsrc=["']([^"']+)""")


def images_shown(pages: list[Path]) -> set[Path]:
    """The files the pages show as images or link to (a plot a page links is one a reader opens)."""
    shown = set()
    for page in pages:
        for m in IMAGE.finditer(page.read_text()):
            target = (m.group(1) or m.group(2)).split("#")[0]
            if target and "://" not in target:
                shown.add((page.parent / target).resolve())
    return shown


def unshown_images(pages: list[Path], img_dir: Path) -> list[str]:
    shown = images_shown(pages)
    return [f"{p.relative_to(img_dir.parent.parent).as_posix()} is shown by no page"
            for p in sorted(img_dir.iterdir()) if p.is_file() and not ignored(p.relative_to(REPO).as_posix()
                                                                             if p.is_relative_to(REPO) else p.name)
            and p.resolve() not in shown]


def test_every_image_is_shown_by_a_page():
    """A plot no page shows is either a figure a page should show (with what it shows) or a stale one."""
    assert unshown_images(PAGES, REPO / "docs" / "img") == []


def test_an_image_no_page_shows_is_found(tmp_path):
    (tmp_path / "docs" / "img").mkdir(parents=True)
    for name in ("shown.png", "linked.png", "orphan.png"):
        (tmp_path / "docs" / "img" / name).write_bytes(b"")
    page = tmp_path / "docs" / "page.md"
    page.write_text("![what it shows](img/shown.png) and [the plot](img/linked.png#top); `img/orphan.png` in code.\n")
    assert unshown_images([page], tmp_path / "docs" / "img") == ["docs/img/orphan.png is shown by no page"]
