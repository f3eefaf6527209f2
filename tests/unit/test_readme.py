"""README.md's commands stay runnable: every command in its ```sh, ```shell and ```console
blocks belongs to a class checked here against the code, or to ALLOWED with the reason it is
safe unchecked. A command of no class fails, naming itself, so whoever edits the README
classifies it.

- `make TARGET [VAR=value]`: a target of the Makefile; `make demo` and `make test` lead;
- `txnwatch ...`: parsed by the real CLI parser (`serve` also through `serve --check-config`);
- `pip install dist/...`, `helm install ... dist/...`, `podman load -i dist/...`,
  `skopeo copy oci-archive:dist/...`, `sha256sum -c SHA256SUMS`: the names `make release`
  writes into dist/ (txnwatch.__version__, the chart's version); `helm --set` keys of
  values.yaml or values.schema.json;
- `podman`/`docker` `run`, `tag`, `push`: image references of this version, `TXNWATCH_*`
  variables the configuration knows, mounts consistent with TXNWATCH_CONFIG.

Pure: reads files of the checkout and starts nothing (no make, pip, helm, podman or docker).
Parsing is shlex's: continuation lines joined, `#` comments dropped (an unquoted `#` inside a
word too, unlike sh: quote such a word), `&&`, `||`, `;`, `|` and `( )` split commands, a `cd`
applies to the commands after it in its block."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
import yaml

import txnwatch
from txnwatch.cli import build_parser
from txnwatch.cli import main as cli_main
from txnwatch.config import DEFAULT_PORT, ENV_PREFIX, OVERRIDES, ConfigError, load_config
from txnwatch.config.schema import ROOT as CONFIG_ROOT

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHART = ROOT / "charts" / "txnwatch"
SHELL_LANGUAGES = {"sh", "shell", "console"}

VERSION = txnwatch.__version__
CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())
CHART_VERSION = str(CHART_YAML["version"])

# What `make release` writes into dist/ (scripts/dist-python.sh, scripts/package-chart.sh and the
# release's image, SBOM and checksums), by kind.
ARTIFACTS = {
    "wheel": f"txnwatch-{VERSION}-py3-none-any.whl",
    "sdist": f"txnwatch-{VERSION}.tar.gz",
    "chart": f"txnwatch-{CHART_VERSION}.tgz",
    "image": f"txnwatch-{VERSION}.oci.tar",
    "sbom": f"txnwatch-{VERSION}.cdx.json",
    "sums": "SHA256SUMS",
}
DIST = "dist"
# The image by the name each engine has for it: podman's for what `make image` builds and
# `podman load` reads (scripts/build-image.sh tags txnwatch:<version>, which podman qualifies
# with localhost/), docker's once skopeo copied the archive in, and the README's stand-in for
# the reader's registry.
LOCAL_IMAGE = f"localhost/txnwatch:{VERSION}"
DOCKER_IMAGE = f"txnwatch:{VERSION}"
REGISTRY = "registry.example.com"
REGISTRY_IMAGE = f"{REGISTRY}/txnwatch:{VERSION}"
ENGINE_IMAGES = {"podman": {LOCAL_IMAGE, REGISTRY_IMAGE}, "docker": {DOCKER_IMAGE, REGISTRY_IMAGE}}

# Commands no class checks, each with the reason that is safe. Keep it short: a command that
# can be checked against the code gets a class instead.
ALLOWED: dict[tuple[str, ...], str] = {
    ("cd",): "changes the directory only; the commands after it in its block are checked relative to it",
}


@dataclass(frozen=True)
class Command:
    line: int                          # README.md's line of its first line
    text: str                          # the logical line it is part of (continuations joined)
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]   # leading NAME=value assignments
    cwd: str                           # relative to the checkout, after the `cd`s before it

    def __str__(self) -> str:
        return f"README.md:{self.line}: `{' '.join(self.argv)}`"


# ---------------------------------------------------------------------------------------------
# parsing


def shell_blocks(text: str) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """(language, [(line number, line)]) of each fenced code block in a shell language."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        j = i + 1
        closing = rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*"
        while j < len(lines) and not re.fullmatch(closing, lines[j]):
            j += 1
        if lang in SHELL_LANGUAGES:
            yield lang, [(k + 1, lines[k]) for k in range(i + 1, min(j, len(lines)))]
        i = j + 1


def logical_lines(lang: str, body: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Backslash continuations joined; in a console block only the `$ ` prompts' commands."""
    i = 0
    while i < len(body):
        number, line = body[i]
        i += 1
        if lang == "console":
            if not line.startswith("$ "):
                continue                                  # the command's output
            line = line[2:]
        while line.rstrip().endswith("\\") and i < len(body):
            line = line.rstrip()[:-1] + " " + body[i][1]
            i += 1
        if line.strip():
            yield number, line


def tokens(line: str) -> list[str]:
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lex.whitespace_split = True
    lex.commenters = "#"
    return list(lex)


def commands(text: str) -> list[Command]:
    """Every simple command of the shell blocks, in order."""
    out = []
    for lang, body in shell_blocks(text):
        cwd = "."
        for number, line in logical_lines(lang, body):
            saved: list[str] = []
            for words in _split_operators(tokens(line)):
                if words == ["("]:
                    saved.append(cwd)
                    continue
                if words == [")"]:
                    cwd = saved.pop() if saved else cwd
                    continue
                env = []
                while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                    env.append(tuple(words.pop(0).split("=", 1)))
                if not words:
                    continue
                out.append(Command(number, line.strip(), tuple(words), tuple(env), cwd))
                if words[0] == "cd" and len(words) == 2:
                    cwd = os.path.normpath(os.path.join(cwd, words[1]))
    return out


def _split_operators(toks: list[str]) -> Iterator[list[str]]:
    words: list[str] = []
    for t in toks:
        if t in ("&&", "||", ";", "|", "&"):
            if words:
                yield words
            words = []
        elif t in ("(", ")"):
            if words:
                yield words
            words = []
            yield [t]
        else:
            words.append(t)
    if words:
        yield words


# ---------------------------------------------------------------------------------------------
# what the checkout says


def makefile_targets() -> set[str]:
    targets = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.%/-]+(?:[ \t]+[A-Za-z0-9_.%/-]+)*)[ \t]*:(?![:=])", line)
        if m:
            targets |= {t for t in m.group(1).split() if not t.startswith(".")}
    return targets


def extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def artifact_problems(cmd: Command, path: str, kinds: tuple[str, ...]) -> list[str]:
    """`path` (relative to the command's directory) must be dist/<what make release writes>."""
    where = PurePosixPath(os.path.normpath(os.path.join(cmd.cwd, path)))
    wanted = [f"{DIST}/{ARTIFACTS[k]}" for k in kinds]
    if str(where) in wanted:
        return []
    return [f"{path}: `make release` writes {' or '.join(wanted)} (txnwatch {VERSION} from "
            f"txnwatch/__init__.py, chart {CHART_VERSION} from charts/txnwatch/Chart.yaml)"]


def image_problems(engine: str, ref: str) -> list[str]:
    known = sorted(ENGINE_IMAGES[engine])
    if ref in known:
        return []
    return [f"image {ref!r}: {engine} knows this release's image as {' or '.join(known)}"]


def values_has(parts: list[str | int]) -> bool:
    """The key is in the chart's values.yaml or values.schema.json."""
    return _in_values(yaml.safe_load((CHART / "values.yaml").read_text()), parts) or \
        _in_schema(json.loads((CHART / "values.schema.json").read_text()), parts)


def _in_values(node, parts: list[str | int]) -> bool:
    for p in parts:
        if isinstance(p, int):
            if not isinstance(node, list) or not node:
                return False
            node = node[min(p, len(node) - 1)]       # any item: the first ones show the shape
        elif isinstance(node, dict) and p in node:
            node = node[p]
        else:
            return False
    return True


def _in_schema(node: dict, parts: list[str | int]) -> bool:
    if not parts:
        return True
    branches = node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", [])
    if any(_in_schema(b, parts) for b in branches):
        return True
    head, rest = parts[0], parts[1:]
    if isinstance(head, int):
        return isinstance(node.get("items"), dict) and _in_schema(node["items"], rest)
    props = node.get("properties") or {}
    if head in props:
        return _in_schema(props[head], rest)
    extra = node.get("additionalProperties")
    return isinstance(extra, dict) and _in_schema(extra, rest)


def helm_key(key: str) -> list[str | int]:
    """`config.clusters[0].name` -> ["config", "clusters", 0, "name"] (helm's strvals; `\\.`
    escapes a dot in a name)."""
    out: list[str | int] = []
    for seg in re.split(r"(?<!\\)\.", key):
        m = re.fullmatch(r"((?:[^\[\]]|\\\.)+)((?:\[\d+\])*)", seg)
        if not m:
            return [key]
        out.append(m.group(1).replace("\\.", "."))
        out += [int(i) for i in re.findall(r"\[(\d+)\]", m.group(2))]
    return out


def known_variable(name: str) -> str | None:
    """None when the configuration (or the CLI) reads the variable, else why not."""
    rest = name[len(ENV_PREFIX):]
    if not name.startswith(ENV_PREFIX):
        return f"{name}: not a txnwatch variable (TXNWATCH_*); the image reads no other"
    if rest.lower() in OVERRIDES:
        return None
    if rest in ("SHARD", "TOTAL_SHARDS"):
        read = name in (ROOT / "txnwatch" / "cli.py").read_text()
        return None if read else f"{name}: the CLI no longer reads it"
    if "__" not in rest and rest.lower() not in CONFIG_ROOT.names:
        return (f"{name}: no such variable: the flat ones are TXNWATCH_ + "
                f"{sorted(k.upper() for k in OVERRIDES)}, the nested ones name a key of the file "
                f"(TXNWATCH_HTTP__PORT: docs/configuration.md)")
    return None


# ---------------------------------------------------------------------------------------------
# the classes: each returns the command's problems


def check_make(cmd: Command) -> list[str]:
    targets, problems = makefile_targets(), []
    if not cmd.argv[1:]:
        problems.append("name the target")
    for arg in cmd.argv[1:]:
        if "=" in arg:
            var = arg.split("=", 1)[0]
            readers = [ROOT / "Makefile", *sorted((ROOT / "scripts").glob("*.sh")),
                       *sorted((ROOT / "txnwatch_dev").rglob("*.py"))]
            if not any(var in p.read_text() for p in readers):
                problems.append(f"{var}: neither the Makefile nor what its targets run reads it")
        elif arg.startswith("-"):
            problems.append(f"make option {arg}: not checked here")
        elif arg not in targets:
            problems.append(f"make {arg}: the Makefile has no such target "
                            f"(it has {', '.join(sorted(targets))})")
    return problems


def strict_parser() -> argparse.ArgumentParser:
    """The CLI's parser, taking no abbreviated flag (argparse would take `--bootstrap-server`
    for `--bootstrap-servers`): the README spells every flag as the CLI declares it."""
    parser = build_parser()
    parsers = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers += action.choices.values()
    for p in parsers:
        p.allow_abbrev = False
    return parser


def _cli_problems(argv: list[str]) -> list[str]:
    err, out = io.StringIO(), io.StringIO()
    try:
        with redirect_stderr(err), redirect_stdout(out):
            strict_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            last = (err.getvalue().strip().splitlines() or [f"exit {exc.code}"])[-1]
            return [f"txnwatch's parser rejects it: {last}"]
    return []


def _serve_check_config(argv: list[str], env: dict[str, str], tmp: Path) -> list[str]:
    """`txnwatch serve ... --check-config`: the flags (and the variables) make a valid
    configuration, without contacting Kafka. A --config file the README only names is replaced
    by a minimal one."""
    argv = list(argv)
    for i, a in enumerate(argv[:-1]):
        if a == "--config" and not (ROOT / argv[i + 1]).exists():
            argv[i + 1] = str(_minimal_config(tmp))
    if "--check-config" not in argv:
        argv.append("--check-config")
    saved = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    for k in saved:
        del os.environ[k]
    os.environ.update(env)
    err, out = io.StringIO(), io.StringIO()
    try:
        with redirect_stderr(err), redirect_stdout(out):
            code = cli_main(argv)
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)
    return [] if code == 0 else [f"`txnwatch {' '.join(argv)}` exits {code}: {err.getvalue().strip()}"]


def _minimal_config(tmp: Path) -> Path:
    path = tmp / "txnwatch.yaml"
    path.write_text("clusters:\n  - {name: prod, bootstrap_servers: 'kafka:9092'}\n")
    return path


def check_txnwatch(cmd: Command, tmp: Path) -> list[str]:
    argv = list(cmd.argv[1:])
    problems = _cli_problems(argv)
    if not problems and argv[:1] == ["serve"]:
        problems = _serve_check_config(argv, dict(cmd.env), tmp)
    return problems


def check_pip(cmd: Command) -> list[str]:
    args = list(cmd.argv[1:])
    if args[:1] != ["install"]:
        return ["only `pip install dist/<wheel or sdist>` is checked"]
    problems = [f"pip option {a}: not checked here" for a in args[1:] if a.startswith("-")]
    for target in (a for a in args[1:] if not a.startswith("-")):
        m = re.fullmatch(r"(.+?)(?:\[([\w,\s-]*)\])?", target)
        problems += artifact_problems(cmd, m.group(1), ("wheel", "sdist"))
        for extra in filter(None, (e.strip() for e in (m.group(2) or "").split(","))):
            if extra not in extras():
                problems.append(f"extra [{extra}]: pyproject.toml declares {sorted(extras())}")
    return problems


HELM_FLAGS = {"--create-namespace", "--wait", "--atomic"}
HELM_OPTIONS = {"--namespace", "-n", "--set", "-f", "--values", "--version", "--timeout"}


def helm_sets(cmd: Command) -> list[str]:
    """The `--set` values of a helm command, in order."""
    args, out = list(cmd.argv[1:]), []
    for i, a in enumerate(args):
        if a == "--set" and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith("--set="):
            out.append(a.split("=", 1)[1])
    return out


def check_helm(cmd: Command) -> list[str]:
    args = list(cmd.argv[1:])
    if args[:1] not in (["install"], ["upgrade"]):
        return ["only `helm install` and `helm upgrade` are checked"]
    problems, positional, i = [], [], 1
    while i < len(args):
        a = args[i]
        name, inline = (a.split("=", 1) + [None])[:2] if a.startswith("--") else (a, None)
        if name in HELM_FLAGS:
            i += 1
            continue
        if name in HELM_OPTIONS:
            value = inline if inline is not None else (args[i + 1] if i + 1 < len(args) else "")
            i += 1 if inline is not None else 2
            if name in ("-f", "--values") and not (ROOT / cmd.cwd / value).is_file():
                problems.append(f"{name} {value}: no such file in the checkout")
            continue
        if a.startswith("-"):
            problems.append(f"helm option {a}: not checked here (add it to HELM_FLAGS or HELM_OPTIONS)")
        else:
            positional.append(a)
        i += 1
    for value in helm_sets(cmd):
        for part in re.split(r"(?<!\\),", value):
            if "=" not in part:
                problems.append(f"--set {value}: {part!r} is not key=value (helm splits --set at commas; "
                                "escape a comma in a value as \\,)")
                continue
            key = part.split("=", 1)[0]
            if not values_has(helm_key(key)):
                problems.append(f"--set {key}: no such key in charts/txnwatch/values.yaml "
                                "or values.schema.json")
    if len(positional) != 2:
        problems.append(f"expected `helm {args[0]} RELEASE CHART`, got {positional}")
    else:
        problems += artifact_problems(cmd, positional[1], ("chart",))
    return problems


RUN_FLAGS = {"-d", "--detach", "--rm", "--read-only", "-i", "-t", "-it", "--init"}
RUN_OPTIONS = {"--name", "--network", "--net", "-e", "--env", "-v", "--volume", "-p", "--publish", "--tmpfs",
               "--restart", "--health-cmd"}
HEALTH_CMD = "txnwatch healthcheck"        # the Dockerfile's HEALTHCHECK, which an OCI archive drops


def _run_options(args: list[str]) -> tuple[list[tuple[str, str | None]], list[str], list[str]]:
    """(options with their values, the image and what follows it, problems)."""
    opts, problems, i = [], [], 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        name, inline = (a.split("=", 1) + [None])[:2] if a.startswith("--") else (a, None)
        if name in RUN_FLAGS:
            opts.append((name, None))
            i += 1
        elif name in RUN_OPTIONS:
            value = inline if inline is not None else (args[i + 1] if i + 1 < len(args) else "")
            opts.append((name, value))
            i += 1 if inline is not None else 2
        else:
            problems.append(f"run option {a}: not checked here (add it to RUN_FLAGS or RUN_OPTIONS)")
            i += 1
    return opts, args[i:], problems


def check_run(engine: str, cmd: Command, tmp: Path) -> list[str]:
    opts, rest, problems = _run_options(list(cmd.argv[2:]))
    if not rest:
        return problems + ["no image named"]
    problems += image_problems(engine, rest[0])
    if rest[1:]:                                     # the image's entrypoint is `txnwatch`
        problems += _cli_problems(rest[1:])
    env = {}
    for name, value in opts:
        if name in ("-e", "--env"):
            var, _, val = (value or "").partition("=")
            why = known_variable(var)
            if why:
                problems.append(why)
            env[var] = val
    mounts = {}
    for name, value in opts:
        if name in ("-v", "--volume"):
            src, _, rest_ = (value or "").partition(":")
            dst = rest_.split(":", 1)[0]
            if not (src.startswith(("/", "$PWD/", "${PWD}/"))):
                problems.append(f"-v {value}: a source that is not an absolute path is a named volume: "
                                "write $PWD/...")
            mounts[dst] = src
    config = env.get("TXNWATCH_CONFIG")
    if config and not any(config == d or config.startswith(d.rstrip("/") + "/") for d in mounts):
        problems.append(f"TXNWATCH_CONFIG={config}: no -v mounts it")
    for dst in mounts:
        if not any(v == dst or v.startswith(dst.rstrip("/") + "/") for v in env.values()):
            problems.append(f"-v ...:{dst}: no TXNWATCH_* variable names what is mounted there")
    names = dict(opts)
    if names.get("--health-cmd", HEALTH_CMD) != HEALTH_CMD:
        problems.append(f"--health-cmd {names['--health-cmd']!r}: the image's health check is {HEALTH_CMD!r}")
    if engine == "docker" and "--read-only" in names and not any(
            n == "--tmpfs" and (v or "").split(":")[0] == "/tmp" for n, v in opts):
        problems.append("docker --read-only needs --tmpfs /tmp: the worker processes publish through "
                        "files there")
    for name, value in opts:
        if name in ("-p", "--publish") and "TXNWATCH_PORT" not in env and \
                (value or "").rsplit(":", 1)[-1].split("/")[0] != str(DEFAULT_PORT):
            problems.append(f"-p {value}: the image listens on {DEFAULT_PORT}")
    if not problems:                                 # the variables make a configuration `serve` takes
        if config:
            env["TXNWATCH_CONFIG"] = str(_minimal_config(tmp))
        try:
            load_config({}, env=env)
        except ConfigError as exc:
            problems.append(f"the variables do not make a configuration: {exc}")
    return problems


def check_container(cmd: Command, tmp: Path) -> list[str]:
    engine, args = cmd.argv[0], list(cmd.argv[1:])
    sub = args[0] if args else ""
    if sub == "run":
        return check_run(engine, cmd, tmp)
    if sub == "load":
        rest = args[1:]
        if len(rest) == 2 and rest[0] in ("-i", "--input"):
            return artifact_problems(cmd, rest[1], ("image",))
        return [f"expected `{engine} load -i dist/{ARTIFACTS['image']}`"]
    if sub == "tag" and len(args) == 3:
        problems = image_problems(engine, args[1])
        if args[2] != REGISTRY_IMAGE:
            problems.append(f"tag {args[2]!r}: the README's registry reference is {REGISTRY_IMAGE}")
        return problems
    if sub == "push" and len(args) == 2:
        return [] if args[1] == REGISTRY_IMAGE else [f"push {args[1]!r}: push {REGISTRY_IMAGE}"]
    return [f"`{engine} {sub}` is not checked here: add it to check_container"]


def check_skopeo(cmd: Command) -> list[str]:
    args = list(cmd.argv[1:])
    if len(args) != 3 or args[0] != "copy" or not args[1].startswith("oci-archive:") \
            or not args[2].startswith("docker-daemon:"):
        return ["only `skopeo copy oci-archive:dist/<image archive> docker-daemon:<image>` is checked"]
    path = args[1].removeprefix("oci-archive:").split(":", 1)[0]
    image = args[2].removeprefix("docker-daemon:")
    return artifact_problems(cmd, path, ("image",)) + image_problems("docker", image)


def check_sha256sum(cmd: Command) -> list[str]:
    args = list(cmd.argv[1:])
    if args[:1] not in (["-c"], ["--check"]) or len(args) != 2:
        return ["only `sha256sum -c SHA256SUMS` is checked"]
    problems = artifact_problems(cmd, args[1], ("sums",))
    if cmd.cwd != DIST:
        problems.append(f"run it in {DIST}/ (`cd {DIST}` first): SHA256SUMS names the files beside it")
    return problems


CLASSES: dict[str, Callable[..., list[str]]] = {
    "make": check_make,
    "txnwatch": check_txnwatch,
    "pip": check_pip,
    "pip3": check_pip,
    "helm": check_helm,
    "podman": check_container,
    "docker": check_container,
    "skopeo": check_skopeo,
    "sha256sum": check_sha256sum,
}
NEEDS_TMP = {check_txnwatch, check_container}


def allowed(cmd: Command) -> str | None:
    for prefix, why in ALLOWED.items():
        if cmd.argv[:len(prefix)] == prefix:
            return why
    return None


def classify(cmd: Command, tmp: Path) -> list[str]:
    """The command's problems; an unclassified command is one."""
    if allowed(cmd):
        return []
    program = PurePosixPath(cmd.argv[0]).name
    check = CLASSES.get(program)
    if check is None:
        return [f"no class checks {program!r}: add a check to tests/unit/test_readme.py (CLASSES), or an "
                f"ALLOWED entry saying why it is safe unchecked"]
    cmd = Command(cmd.line, cmd.text, (program, *cmd.argv[1:]), cmd.env, cmd.cwd)
    return check(cmd, tmp) if check in NEEDS_TMP else check(cmd)


# ---------------------------------------------------------------------------------------------
# the tests


README_COMMANDS = commands(README.read_text())


def test_the_readme_has_commands_to_check():
    assert len(README_COMMANDS) >= 10, [str(c) for c in README_COMMANDS]


@pytest.mark.parametrize("cmd", README_COMMANDS, ids=lambda c: f"L{c.line}-{'-'.join(c.argv[:2])}")
def test_every_readme_command_is_in_a_checked_class(cmd, tmp_path):
    problems = classify(cmd, tmp_path)
    assert not problems, f"{cmd}:\n  " + "\n  ".join(problems)


def test_the_readme_leads_with_make_demo_and_make_test():
    _, first_block = next(shell_blocks(README.read_text()))
    first = commands("```sh\n" + "\n".join(line for _, line in first_block) + "\n```\n")
    assert [c.argv for c in first] == [("make", "demo"), ("make", "test")], first


def test_every_dist_path_in_the_readme_is_one_make_release_writes():
    text = README.read_text()
    named = set(re.findall(r"\bdist/([A-Za-z0-9_.+-]*[A-Za-z0-9])", text))
    assert named, "the README names no artifact of dist/"
    unknown = named - set(ARTIFACTS.values())
    assert not unknown, \
        f"README.md names {sorted(unknown)} in dist/; `make release` writes {sorted(ARTIFACTS.values())}"


def test_the_chart_runs_the_image_the_readme_pushes():
    """`helm install` sets image.repository to the repository of the image the README pushes,
    and leaves image.tag to the chart's appVersion: this version."""
    pushed = {c.argv[2] for c in README_COMMANDS if c.argv[:2] in (("podman", "push"), ("docker", "push"))}
    helm = [c for c in README_COMMANDS if c.argv[:2] == ("helm", "install")]
    assert pushed and helm, "the README pushes the image and installs the chart"
    for cmd in helm:
        parts = [part for value in helm_sets(cmd) for part in re.split(r"(?<!\\),", value)]
        sets = dict(part.split("=", 1) for part in parts if "=" in part)
        assert {f"{sets.get('image.repository')}:{VERSION}"} == pushed, (str(cmd), pushed)
        assert "image.tag" not in sets, str(cmd)
    assert str(CHART_YAML["appVersion"]) == VERSION, "Chart.yaml's appVersion is not txnwatch's version"


def test_make_image_builds_the_image_the_readme_runs():
    """scripts/build-image.sh tags txnwatch:<version>, which podman names localhost/txnwatch:<version>."""
    assert "txnwatch:$version" in (ROOT / "scripts" / "build-image.sh").read_text()


def test_the_release_writes_what_the_readme_installs():
    """What `make release` runs (the Makefile's recipe and scripts/) names the kinds of file the
    README installs: the OCI archive, the SBOM and SHA256SUMS (the wheel, the sdist and the chart
    are named by their tools: scripts/dist-python.sh, scripts/package-chart.sh)."""
    assert "release" in makefile_targets()
    scripts = sorted(p for p in (ROOT / "scripts").glob("*") if p.is_file())
    text = (ROOT / "Makefile").read_text() + "".join(p.read_text() for p in scripts)
    missing = [s for s in (".oci.tar", ".cdx.json", "SHA256SUMS") if s not in text]
    assert not missing, f"neither the Makefile nor scripts/ write {missing}, which the README names"


def test_every_allowed_entry_is_used():
    used = {prefix for prefix in ALLOWED for c in README_COMMANDS if c.argv[:len(prefix)] == prefix}
    assert used == set(ALLOWED), f"ALLOWED entries no README command uses: {sorted(set(ALLOWED) - used)}"


# the checks themselves, on commands the README must not hold

@pytest.mark.parametrize("line, problem", [
    ("make relase", "no such target"),
    ("txnwatch serve --bootstrap-server kafka:9092", "parser rejects"),
    ("txnwatch serve --bootstrap-servers kafka:9092 --port none", "parser rejects"),
    ("txnwatch serve --bootstrap-servers kafka:9092 --poll-timeout -1", "exits 2"),
    ("pip install dist/txnwatch-0.0.1-py3-none-any.whl", "`make release` writes"),
    (f"pip install 'dist/{ARTIFACTS['wheel']}[sparks]'", "extra [sparks]"),
    (f"helm install t dist/{ARTIFACTS['chart']} --set image.repo=x", "no such key"),
    (f"helm install t dist/{ARTIFACTS['chart']} --set config.clusters[0].bootstrap_servers=a:1,b:2",
     "is not key=value"),
    (f"helm install t dist/{ARTIFACTS['chart']} --kube-context x", "not checked here"),
    (f"podman run -d -e TXNWATCH_BOOTSTRAP_SERVER=k:9092 {LOCAL_IMAGE}", "no such variable"),
    (f"podman run -d -e TXNWATCH_BOOTSTRAP_SERVERS=k:9092 -e TXNWATCH_PORT=http {LOCAL_IMAGE}",
     "do not make a configuration"),
    (f"podman run -d -e TXNWATCH_CONFIG=/etc/txnwatch/txnwatch.yaml {LOCAL_IMAGE}", "no -v mounts it"),
    (f"podman run -d -v txnwatch.yaml:/etc/t.yaml -e TXNWATCH_CONFIG=/etc/t.yaml {LOCAL_IMAGE}",
     "named volume"),
    (f"docker run -d --read-only -e TXNWATCH_BOOTSTRAP_SERVERS=k:9092 {DOCKER_IMAGE}", "--tmpfs /tmp"),
    (f"docker run -d -e TXNWATCH_BOOTSTRAP_SERVERS=k:9092 {LOCAL_IMAGE}", "docker knows"),
    (f"podman run -d -p 9100:9100 -e TXNWATCH_BOOTSTRAP_SERVERS=k:9092 {LOCAL_IMAGE}", "listens on"),
    (f"podman run -d {LOCAL_IMAGE} serve --bootstrap-servers k:9092 --prot 1", "parser rejects"),
    ("podman load -i dist/txnwatch.tar", "`make release` writes"),
    ("sha256sum -c dist/SHA256SUMS", "cd dist"),
    ("curl -s http://localhost:10129/metrics", "no class checks 'curl'"),
])
def test_the_checks_catch(line, problem, tmp_path):
    [cmd] = commands(f"```sh\n{line}\n```\n")
    problems = classify(cmd, tmp_path)
    assert any(problem in p for p in problems), problems


def test_the_parser_joins_continuations_drops_comments_and_follows_cd():
    text = ("```console\n$ cd dist && sha256sum -c SHA256SUMS   # checks\nSHA256SUMS: OK\n"
            "$ helm install t x.tgz \\\n    --set a=1\n```\n```python\nnot = 'a command'\n```\n")
    cmds = commands(text)
    assert [(c.argv, c.cwd) for c in cmds] == [
        (("cd", "dist"), "."), (("sha256sum", "-c", "SHA256SUMS"), "dist"),
        (("helm", "install", "t", "x.tgz", "--set", "a=1"), "dist"),
    ]
    assert [c.argv[0] for c in commands("```sh\n(cd dist && ls)\nls\n```\n")] == ["cd", "ls", "ls"]
    assert [c.cwd for c in commands("```sh\n(cd dist && ls)\nls\n```\n")] == [".", "dist", "."]


def test_the_health_cmd_is_the_dockerfiles_healthcheck():
    match = re.search(r"^HEALTHCHECK .*?CMD (\[.*?\])", (ROOT / "Dockerfile").read_text(), re.M | re.S)
    assert match and " ".join(json.loads(match.group(1))) == HEALTH_CMD
