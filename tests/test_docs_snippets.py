"""Every ```bash and ```python snippet of README.md and docs/*.md runs, as a reader would paste it.

Rules (what runs, where, and what is skipped):

* Only fences labelled ``bash`` or ``python`` run; ``text``, ``json``, ``yaml`` and unlabelled fences are
  shown, not run (a command that must not run here, e.g. an 8-minute benchmark or a GPU cluster launch,
  is fenced ``text`` with a tiny runnable form beside it).
* Each page is one test: its snippets run in document order, each in a fresh process (``bash -e -o
  pipefail`` or this interpreter), all in one temporary folder per page, so a file one snippet writes is
  there for the next, but no Python name is (each Python snippet imports what it uses).
  That folder holds links to the checkout's ``recipes``, ``tests`` and ``benchmarks`` (read only: nothing
  a snippet writes can reach the checkout's ``results`` or ``runs``), so the relative paths of the docs work.
* Environment: ``OMP_NUM_THREADS=1``, ``HF_HUB_OFFLINE=1``, this interpreter's ``bin`` first on ``PATH``
  (``dsf`` and ``python`` are the ones under test), ``DSF_DATA_ROOT`` as given or ``../shared/data`` beside
  the checkout, a Hugging Face cache inside the temporary folder, and a timeout per snippet.
* Corpora: a snippet that names ``$DSF_DATA_ROOT`` / ``--data-root`` or a recipe of a real corpus is
  skipped, with the rest of its page, when ``$DSF_DATA_ROOT/ptb`` is absent (as the ``corpus`` tests are).
* The README's two set-up blocks (the first two ```bash blocks, each ``python3 -m venv .venv && pip
  install ... && COMMAND``) are not re-run: installing is what a fresh clone checks (``.ci/run``). Of the
  first, COMMAND (after the last ``&&``, ``.venv/bin/`` dropped) runs with this interpreter's ``dsf``; the
  second's COMMAND is the whole suite, this test's own caller, so it is only checked to be what
  ``.ci/run`` extracts and runs (``test_ci_runs_the_readmes_second_block``, fast tier).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TIMEOUT_S = 600
RUN = ("bash", "python")
# a snippet that reads a real corpus: the data root named, or a recipe of a corpus under DSF_DATA_ROOT
NEEDS_CORPUS = re.compile(r"DSF_DATA_ROOT|--data-root|recipes/(ptb|ptb_char|ptb_subword|wikitext2|text8|wmt_small|imdb_\w+|mnist|srnn_wikipedia)/")
SETUP = re.compile(r"^python3 -m venv \.venv && .*&& (?P<command>[^&]+)$")


@dataclass
class Snippet:
    page: Path
    line: int  # the fence's line, 1-based
    lang: str
    code: str

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def snippets(page: Path) -> list[Snippet]:
    """The fenced blocks of a page, every language (the caller picks bash / python)."""
    lines, found, i = page.read_text().splitlines(), [], 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if m:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            assert end is not None, f"{page.relative_to(ROOT)}:{i + 1}: a fence that is never closed"
            found.append(Snippet(page, i + 1, m.group(1), "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return found


def runnable(page: Path) -> list[Snippet]:
    """The snippets of a page that run, the README's set-up blocks reduced to their command (module docstring)."""
    out = []
    for k, s in enumerate(x for x in snippets(page) if x.lang in RUN):
        if page.name == "README.md" and k < 2:
            m = SETUP.match(s.code.strip())
            assert s.lang == "bash" and m, f"{s.where()}: the README's set-up block {k + 1} is not `python3 -m venv .venv && ... && COMMAND`"
            if k == 1:
                continue  # the whole suite: .ci/run runs it (test_ci_runs_the_readmes_second_block)
            s = Snippet(s.page, s.line, s.lang, m.group("command").replace(".venv/bin/", "") + "\n")
        out.append(s)
    return out


def _data_root() -> Path:
    return Path(os.environ.get("DSF_DATA_ROOT") or ROOT.parent / "shared" / "data").resolve()


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", MPLBACKEND="Agg", DSF_DATA_ROOT=str(_data_root()),
               HF_HOME=str(tmp / ".hf"), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    env.pop("PYTHONPATH", None)
    return env


def run_page(page: Path, tmp: Path) -> None:
    """Run a page's snippets in order in ``tmp``; fail naming the first snippet that fails, with its output."""
    for name in ("recipes", "tests", "benchmarks"):
        (tmp / name).symlink_to(ROOT / name, target_is_directory=True)
    env = _env(tmp)
    for s in runnable(page):
        if NEEDS_CORPUS.search(s.code) and not (_data_root() / "ptb").is_dir():
            pytest.skip(f"{s.where()} (and what follows on the page) reads corpora under DSF_DATA_ROOT={_data_root()}, absent")
        argv = ["bash", "-e", "-o", "pipefail", "-c", s.code] if s.lang == "bash" else [sys.executable, "-c", s.code]
        try:
            done = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{s.where()}: the {s.lang} snippet ran past {TIMEOUT_S} s; snippets must be tiny")
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-3000:]
            pytest.fail(f"{s.where()}: the {s.lang} snippet exited {done.returncode}:\n{s.code}\n--- output (tail) ---\n{tail}")


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_snippets_run(page, tmp_path):
    run_page(page, tmp_path)


def test_ci_runs_the_readmes_second_block():
    """.ci/run extracts the README's second ```bash block: it must be the set-up block that runs the suite."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'blocks[1]' in ci and r'```bash\n(.*?)```' in ci
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    m = SETUP.match(blocks[1].strip())
    assert m and ".[test]" in blocks[1] and "-m pytest" in m.group("command"), blocks[1]
    first = SETUP.match(blocks[0].strip())
    assert first and "dsf score" in first.group("command"), blocks[0]


def test_fences_are_closed_and_labelled():
    """Every fence of README and docs closes, and a runnable-looking one is labelled (else it would silently not run)."""
    for page in PAGES:
        for s in snippets(page):
            assert s.lang, f"{s.where()}: label the fence (bash, python, or text for one that must not run)"


def test_readme_is_short_and_links_resolve():
    """The README stays a front page (at most 200 lines), and every relative link of README and docs/ names a file
    that exists (a page moved or renamed leaves no dead link)."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200, "README.md: move detail into a docs/ page"
    dead = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.split("#", 1)[0]
            if path and not re.match(r"^[a-z]+:", path) and not (page.parent / path).exists():
                dead.append(f"{page.relative_to(ROOT)}: {target}")
    assert not dead, "links to missing files:\n" + "\n".join(dead)
