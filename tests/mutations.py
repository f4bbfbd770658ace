"""The mutation habit (issue 38): careless refactors of the papers' features, each with the tests that must fail.

Run it (from the checkout, with the test extras installed)::

    python -m tests.mutations                 # every mutation: killed / survived, and the score
    python -m tests.mutations --list          # what each one changes, and which tests must kill it
    python -m tests.mutations -k lstm irlm    # only the mutations whose name contains one of these
    python -m tests.mutations --baseline      # first check that each selection passes on the real code
    python -m tests.mutations --restore       # put back what a run killed with -9 left mutated (runs do it first)

Each :class:`Mutation` names one file, an exact text in it (found exactly once) and its replacement. The
harness writes the mutated file, runs the named tests (``OMP_NUM_THREADS=1``, no bytecode written), and
puts the original bytes back at once, also on Ctrl-C or SIGTERM; a kill -9 leaves a journal that the next
run restores first. A mutation is *killed* when its tests fail, *survived* when they pass. Other people
may edit the tree at the same time: only the one named file is touched, for as long as its tests run, and
if that file changed meanwhile the harness undoes only its own replacement (or says what it could not undo).

Not collected by pytest (not a ``test_*.py`` file); ``tests/test_mutations_round2.py`` checks that every
mutation still applies (its text is still in its file) and that its tests exist. A new paper feature gets a
line here: the file, the careless change, the test that catches it (docs/contributing.md, "The mutation habit").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: characters of unchanged text on each side that locate the mutation in a file someone else edited meanwhile
CONTEXT = 120
JOURNAL_DIR = Path(tempfile.gettempdir()) / f"dsf-mutations-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class Mutation:
    """``old`` -> ``new`` in ``file`` (relative to the checkout); ``tests``: pytest node ids that must fail on it,
    ``k``: an optional ``-k`` expression narrowing them."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    k: str | None = None
    what: str = ""


VD = "tests/cells/test_variational_dropout.py::test_mask_only_where_the_recurrent_weights_read_the_state"
R2 = "tests/test_mutations_round2.py"

MUTATIONS: list[Mutation] = [
    # -- the seven that survived every test before issue 38 -------------------------------------------------
    Mutation(
        "a-lstm-matrix-peephole-mask", "dsf_lightning/cells/classic.py",
        'return (True, False, False) if self.peepholes == "matrix" else (True,)',
        'return (True, True, True) if self.peepholes == "matrix" else (True,)',
        (VD,), k="lstm", what="variational dropout mask also on c where the peephole matrices read it (U c)",
    ),
    Mutation(
        "b-eval-draws-state-masks", "dsf_lightning/model/recurrent_lm.py",
        "if not self.training or p == 0 or index is None:", "if p == 0 or index is None:",
        (f"{R2}::test_evaluation_draws_no_dropout_mask",), what="recurrent dropout masks drawn in evaluation",
    ),
    Mutation(
        "b-eval-drops-input-output", "dsf_lightning/model/recurrent_lm.py",
        "if not self.training or p == 0:\n            return y", "if p == 0:\n            return y",
        (f"{R2}::test_evaluation_draws_no_dropout_mask",), what="input / output dropout in evaluation",
    ),
    Mutation(
        "c-lm-mask-unscaled", "dsf_lightning/model/recurrent_lm.py",
        "return like.new_empty(shape).bernoulli_(1 - p) / (1 - p)", "return like.new_empty(shape).bernoulli_(1 - p)",
        (f"{R2}::test_every_lm_mask_is_scaled_by_one_over_keep_probability",), what="the LM's masks without 1/(1-p)",
    ),
    Mutation(
        "d-irlm-direct-no-straight-through", "dsf_lightning/cells/irlm.py",
        "return torch.clamp(self.rho, low + eps, high - eps).detach() + (self.rho - self.rho.detach())",
        "return torch.clamp(self.rho, low + eps, high - eps)",
        (f"{R2}::test_irlm_direct_r_passes_the_gradient_straight_through_at_its_bounds",),
        what="direct r clamped without the straight-through gradient (zero gradient at the bounds)",
    ),
    Mutation(
        "e-fingerprint-train-split-only", "dsf_lightning/training/resume.py",
        "for name, t in corpus.splits.items()}", 'for name, t in corpus.splits.items() if name == "train"}',
        ("tests/training/test_resume_layout.py::test_another_valid_or_test_split_is_a_clear_error",),
        what="the resume fingerprint hashes only the train split",
    ),
    Mutation(
        "f-generation-tempered-logprobs", "dsf_lightning/scoring/generation.py",
        "probs = torch.softmax(next_token_filter(logits, temperature, top_k, top_p), dim=-1)\n",
        "probs = torch.softmax(next_token_filter(logits, temperature, top_k, top_p), dim=-1)\n            logp = probs.log()\n",
        (f"{R2}::test_generation_logprobs_are_the_models_at_temperature_one_without_filtering",),
        what="reported logprobs from the tempered, filtered distribution sampled from",
    ),
    Mutation(
        "g-upward-import-module", "dsf_lightning/cells/registry.py",
        "    _entry_points_loaded = True\n    for ep in",
        '    _entry_points_loaded = True\n    __import__("importlib").import_module("dsf_lightning.training.resume")\n    for ep in',
        ("tests/test_layering.py::test_imports_only_go_down_the_layering",),
        what="cells imports training through importlib.import_module (upward)",
    ),
    # -- more careless refactors of the papers' features ----------------------------------------------------
    Mutation(
        "delta-rnn-gate-swapped", "dsf_lightning/cells/delta.py",
        "h = self.Phi((1 - r) * z + r * h_prev)  # eq. 3 / 8", "h = self.Phi(r * z + (1 - r) * h_prev)  # eq. 3 / 8",
        ("tests/cells/test_delta.py::test_full_delta_rnn_step_is_eq11_with_eq5_gate",), what="DSF eq. 3: r and 1 - r swapped",
    ),
    Mutation(
        "delta-rnn-fast-gate-tanh", "dsf_lightning/cells/delta.py",
        'r = torch.sigmoid(Wx + self.b_r) if self.gate == "data" else torch.sigmoid(self.b_r)  # eq. 5 / 4',
        'r = torch.tanh(Wx + self.b_r) if self.gate == "data" else torch.sigmoid(self.b_r)  # eq. 5 / 4',
        ("tests/cells/test_fast_paths.py",), k="delta", what="DSF eq. 5 gate with the wrong nonlinearity (fast path)",
    ),
    Mutation(
        "delta-rnn-eq12-scaled-at-eval", "dsf_lightning/cells/delta.py",
        "return F.dropout(z, p, training=True) if training else z", "return F.dropout(z, p, training=True) if training else z * (1 - p)",
        ("tests/cells/test_eq12_dropout.py::test_eq12_dropout_against_the_equation",),
        what="inverted eq. 12 dropout scaled again in evaluation",
    ),
    Mutation(
        "lstm-output-gate-reads-old-c", "dsf_lightning/cells/classic.py",
        "a_r = a_r + products[2](c)  # U_r c_t", "a_r = a_r + products[2](c_prev)  # U_r c_t",
        ("tests/cells/test_lstm_matrix_peepholes.py::test_matrix_peepholes_step_is_eqs_16_17",),
        what="DSF eq. 17: the output gate's peephole matrix reads c_{t-1}",
    ),
    Mutation(
        "scrn-context-alpha-swapped", "dsf_lightning/cells/scrn.py",
        "s = (1 - alpha) * xB + alpha * s_prev  # eq. 1", "s = alpha * xB + (1 - alpha) * s_prev  # eq. 1",
        ("tests/cells/test_scrn.py::test_one_step_is_eqs_1_and_2",), what="SCRN eq. 1: alpha and 1 - alpha swapped",
    ),
    Mutation(
        "scrn-recurrent-mask-dropped", "dsf_lightning/cells/scrn.py",
        "        if mask is not None:\n            h_prev = h_prev * mask\n", "",
        (VD,), k="scrn", what="SCRN eq. 9: the step loop forgets the mask on h R",
    ),
    Mutation(
        "ran-forget-gate-dropped", "dsf_lightning/cells/ran.py",
        "c = i * content + f * c_prev  # eq. 1", "c = i * content + c_prev  # eq. 1",
        ("tests/cells/test_ran.py::test_one_step_is_eq_1",), what="RAN eq. 1 without the forget gate",
    ),
    Mutation(
        "sr-softmax-temperature-inverted", "dsf_lightning/cells/state_reg.py",
        "return torch.softmax(self.scores(u) / self.tau, dim=-1)", "return torch.softmax(self.scores(u) * self.tau, dim=-1)",
        ("tests/cells/test_state_reg.py::test_soft_step_is_eqs_1_to_6_by_hand",), what="sr-RNN eq. 2: score * tau",
    ),
    Mutation(
        "sobolev-sum-as-mean", "dsf_lightning/regularizers.py",
        "return jac_t.pow(2).sum(dim=(0, 2))  # [B]", "return jac_t.pow(2).mean(dim=(0, 2))  # [B]",
        ("tests/training/test_regularizers.py::test_penalty_equals_explicit_jacobians",),
        what="SCRN eq. 10: the Frobenius norm's sum as a mean",
    ),
    Mutation(
        "sobolev-penalty-under-dropout", "dsf_lightning/regularizers.py",
        "        module.train(False)\n        yield", "        yield",
        ("tests/training/test_regularizers.py::test_penalty_runs_without_dropout_and_restores_training_mode",),
        what="the Sobolev penalty's trajectory run in training mode (dropout masks drawn)",
    ),
    Mutation(
        "irlm-jacobian-abs", "dsf_lightning/cells/irlm.py",
        "return self.r.pow(2).sum()", "return self.r.abs().sum()",
        ("tests/training/test_regularizers.py::test_irlm_closed_form_is_T_sum_r_squared",),
        what="IRLM closed-form ||diag(r)||_F^2 as sum |r|",
    ),
    Mutation(
        "irlm-state-detached", "dsf_lightning/cells/irlm.py",
        "x = projected_t + self.r * x_prev  # sec. 3", "x = projected_t + self.r * x_prev.detach()  # sec. 3",
        ("tests/cells/test_fast_paths.py",), k="irlm", what="IRLM step loop detaches the carried state",
    ),
    Mutation(
        "window-targets-off-by-one", "dsf_lightning/data/streams.py",
        "return self.streams[:, lo:hi], self.streams[:, lo + 1 : hi + 1], torch.tensor(index)",
        "return self.streams[:, lo:hi], self.streams[:, lo + 2 : hi + 2], torch.tensor(index)",
        ("tests/training/test_tbptt.py",), what="targets two tokens ahead instead of the next token",
    ),
    Mutation(
        "tbptt-state-not-detached", "dsf_lightning/model/recurrent_lm.py",
        "return tuple(tuple(s.detach() for s in layer) for layer in state)", "return tuple(tuple(s for s in layer) for layer in state)",
        ("tests/training/test_tbptt.py::test_detaching_the_carried_state_stops_gradients_at_the_window",),
        what="truncated BPTT that does not cut the graph at the window",
    ),
    Mutation(
        "gru-outer-function-swapped", "dsf_lightning/cells/classic.py",
        "return torch.lerp(h_prev, g.to(h_prev.dtype), r.to(h_prev.dtype))",
        "return torch.lerp(g.to(h_prev.dtype), h_prev, r.to(h_prev.dtype))",
        ("tests/cells/test_classic.py::test_gru_step_by_hand",), what="DSF eq. 18: r weights h_{t-1} instead of g",
    ),
    Mutation(
        "lm-loss-mean-not-sum", "dsf_lightning/training/language_model.py",
        'return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")',
        'return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="mean")',
        ("tests/training/test_fused_loss.py",), what="the summed NLL the module divides itself taken as a mean",
    ),
    Mutation(
        "lm-no-training-policy", "dsf_lightning/training/language_model.py",
        "        return module_callbacks(self)\n\n    def setup(self, stage: str) -> None:",
        "        return []\n\n    def setup(self, stage: str) -> None:",
        ("tests/training/test_policy.py::test_a_plain_trainer_gets_the_policy_from_the_module",
         "tests/reliability/test_plain_trainer_resume.py"),
        what="issue 36: the module no longer hands a plain Trainer the training policy (guard, atomic checkpoints)",
    ),
]


# ------------------------------------------------------------------------------------------------ the runner
class _Stop(Exception):
    """SIGTERM / SIGHUP, raised where the harness is so that the file is restored on the way out."""


def _raise_stop(signum, frame):  # pragma: no cover - exercised by hand
    raise _Stop(signal.Signals(signum).name)


def _journal(path: Path) -> Path:
    return JOURNAL_DIR / (hashlib.sha256(str(path).encode()).hexdigest()[:16] + ".json")


def recover() -> list[str]:
    """Restore every file a killed run left mutated (its journal names the file, its original and mutated bytes)."""
    notes = []
    for entry in sorted(JOURNAL_DIR.glob("*.json")) if JOURNAL_DIR.is_dir() else []:
        record = json.loads(entry.read_text())
        path, original, mutated = Path(record["path"]), bytes.fromhex(record["original"]), bytes.fromhex(record["mutated"])
        if path.exists() and path.read_bytes() == mutated:
            _write(path, original)
            notes.append(f"restored {path} (left mutated by an interrupted run)")
        elif path.exists() and path.read_bytes() != original:
            notes.append(f"NOT restored {path}: it changed since; its original is in {entry}")
            continue
        entry.unlink()
    return notes


def _load_fs():
    """``dsf_lightning/_fs.py`` (stdlib only) loaded by its path: not through the package, whose import would
    read (and need) the very files being mutated, and take torch's import time."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_dsf_mutations_fs", ROOT / "dsf_lightning" / "_fs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_FS = _load_fs()


def _write(path: Path, data: bytes) -> None:
    _FS.write_atomic(path, data)  # readers see the old file or the new one, never half of one


def check(mutation: Mutation) -> str | None:
    """Why ``mutation`` cannot be applied (its text is not in its file exactly once), or None."""
    path = ROOT / mutation.file
    if not path.is_file():
        return f"{mutation.file} does not exist"
    n = path.read_text(encoding="utf-8").count(mutation.old)
    return None if n == 1 else f"its text occurs {n} times in {mutation.file} (must be once): update the mutation"


def _pytest(mutation: Mutation, timeout: float) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header", *mutation.tests]
    if mutation.k:
        cmd += ["-k", mutation.k]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout:.0f} s"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def run_one(mutation: Mutation, timeout: float) -> tuple[str, str]:
    """Apply, test, restore. Returns (outcome, detail): killed / survived / error."""
    problem = check(mutation)
    if problem:
        return "error", problem
    path = ROOT / mutation.file
    original = path.read_bytes()
    mutated = original.decode("utf-8").replace(mutation.old, mutation.new, 1).encode("utf-8")
    JOURNAL_DIR.mkdir(parents=True, exist_ok=True)
    journal = _journal(path)
    journal.write_text(json.dumps({"path": str(path), "original": original.hex(), "mutated": mutated.hex()}))
    written = 0.0
    try:
        _write(path, mutated)
        written = time.time()
        rc, tail = _pytest(mutation, timeout)
    finally:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            # a later second than the mutated write: a .pyc another process cached for the mutant is then stale
            if written:
                time.sleep(max(0.0, int(written) + 1 - time.time()))
            note = _restore(path, original, mutated, mutation)  # raises, keeping the journal, if it cannot
            journal.unlink(missing_ok=True)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if note:
        print(note, file=sys.stderr)
    if rc == 1:
        return "killed", tail
    if rc == 0:
        return "survived", tail
    return "error", f"pytest exit {rc}: {tail}"


def _restore(path: Path, original: bytes, mutated: bytes, mutation: Mutation) -> str | None:
    """Put ``original`` back; None when done cleanly, else a note. A file someone else edited meanwhile keeps
    their edit: only the mutated text, found with the unchanged text around it, is turned back."""
    now = path.read_bytes() if path.exists() else None
    if now == mutated or now is None:
        _write(path, original)
        return None
    if now == original:
        return None
    text, before = now.decode("utf-8"), original.decode("utf-8")
    at = before.index(mutation.old)
    head, tail = before[max(0, at - CONTEXT) : at], before[at + len(mutation.old) : at + len(mutation.old) + CONTEXT]
    if text.count(head + mutation.old + tail) == 1 and head + mutation.new + tail not in text:
        return f"{mutation.file} changed while {mutation.name} ran, the mutation already undone: left as it is"
    if text.count(head + mutation.new + tail) == 1:
        _write(path, text.replace(head + mutation.new + tail, head + mutation.old + tail, 1).encode("utf-8"))
        return f"{mutation.file} changed while {mutation.name} ran: their edit kept, only the mutation undone"
    raise RuntimeError(
        f"{mutation.file} changed near the mutation while {mutation.name} ran, so it was left as it is: check it "
        f"by hand (the original is kept in {_journal(path)}; `python -m tests.mutations --restore` does nothing to it)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutations", description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", nargs="*", default=None, metavar="WORD", help="only mutations whose name contains one of these")
    parser.add_argument("--list", action="store_true", help="list the mutations and their tests, run nothing")
    parser.add_argument("--restore", action="store_true", help="only restore what a killed run left mutated")
    parser.add_argument("--baseline", action="store_true", help="first run each selection on the unmutated code")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutation's tests (default 300)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.k or any(w in m.name for w in args.k)]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.file}: {m.what}\n    tests: {' '.join(m.tests)}" + (f" -k {m.k}" if m.k else ""))
        return 0
    for note in recover():
        print(note, file=sys.stderr)
    if args.restore:
        return 0
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started where SIGINT was ignored
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGHUP, _raise_stop)
    counts = {"killed": 0, "survived": 0, "error": 0}
    try:
        for m in chosen:
            start = time.time()
            if args.baseline:
                rc, tail = _pytest(m, args.timeout)
                if rc != 0:
                    counts["error"] += 1
                    print(f"{'error':9} {m.name}: its tests fail without the mutation ({tail})", flush=True)
                    continue
            outcome, detail = run_one(m, args.timeout)
            counts[outcome] += 1
            print(f"{outcome:9} {m.name} ({time.time() - start:.0f} s): {detail}", flush=True)
    except RuntimeError as err:  # a file that could not be restored safely: say which, stop
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, _Stop) as stop:
        print(f"interrupted ({str(stop) or 'Ctrl-C'}): the file was restored", file=sys.stderr)
        return 130
    scored = counts["killed"] + counts["survived"]
    print(f"score: {counts['killed']}/{scored} killed" + (f", {counts['error']} error(s)" if counts["error"] else ""))
    return 0 if counts["survived"] == 0 and counts["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
