"""Everything the package knows about a cell is declared on the cell class (``RecurrentCell``'s
``citation``, ``equations``, ``family``, ``state_names``, ``size_options``, ``regularization_options``,
``jacobian_form`` / ``jacobian_norm``, ``implementation``), so a new cell is one file plus its entry in
``variants.py``. Every registered cell, in every variant, must declare it and agree with what it does.
"""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
import torch

from dsf_lightning.cells import CellOptionError, RecurrentCell, get_cell, list_cells
from dsf_lightning.cells.registry import cell_options

from .variants import VARIANTS

F64 = torch.float64
FORMS = (None, "step", "constant")


def knowledge_problems(cls: type[RecurrentCell], cell: RecurrentCell) -> list[str]:
    """What ``cls`` fails to declare, or declares wrongly, checked against a built ``cell``."""
    problems = []
    if not (isinstance(cls.citation, str) and re.search(r"\b(19|20)\d\d\b", cls.citation)):
        problems.append(f"citation {cls.citation!r}: the paper with its year")
    for attr in ("equations", "family"):
        if not (isinstance(getattr(cls, attr), str) and getattr(cls, attr).strip()):
            problems.append(f"{attr} is empty")
    x = torch.randn(2, 3, cell.input_size)
    _, state = cell(x)
    names = tuple(cell.state_names)
    if not (len(names) == len(state) == len(cell.state_sizes)):
        problems.append(f"state_names {names} but forward returns {len(state)} state tensor(s)")
    if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        problems.append(f"state_names {names}: distinct non-empty names")
    accepted = cell_options(cls) or []
    for option, part in cls.size_options.items():
        if option not in accepted:
            problems.append(f"size_options names {option!r}, not an option of the cell")
        if part is not None and not (isinstance(part, Fraction) and 0 < part <= 1):
            problems.append(f"size_options[{option!r}] = {part!r}: a Fraction in (0, 1] or None")
    for option in cls.regularization_options:
        if option not in accepted:
            problems.append(f"regularization_options names {option!r}, not an option of the cell")
    if cls.jacobian_form not in FORMS:
        problems.append(f"jacobian_form {cls.jacobian_form!r} not one of {FORMS}")
    return problems


def _cases():
    for name in list_cells():
        for variant in VARIANTS.get(name, []):
            yield pytest.param(name, variant, id=f"{name}-{variant[0]}")


def _build(name, variant):
    options, input_size = variant[1], (variant[2] if len(variant) > 2 else 5)
    torch.manual_seed(0)
    return get_cell(name)(input_size, input_size if name == "ran-simple" else 6, **options)


@pytest.mark.parametrize("name,variant", list(_cases()))
def test_every_registered_cell_declares_its_knowledge(name, variant):
    cell = _build(name, variant).eval()
    assert knowledge_problems(type(cell), cell) == []


def test_a_cell_without_the_knowledge_fails_the_check():
    class Bare(RecurrentCell):  # a new cell that declares nothing, with two state tensors
        def __init__(self, input_size, hidden_size, *, width: int = 2):
            super().__init__(input_size, hidden_size)
            self.state_sizes = (hidden_size, hidden_size)
            self.W = torch.nn.Parameter(torch.randn(hidden_size, input_size))

        def project_inputs(self, x):
            return x @ self.W.T

        def recur(self, projected_t, state):
            return projected_t, (projected_t, state[1])

    problems = knowledge_problems(Bare, Bare(3, 4))
    assert any("citation" in p for p in problems)
    assert any("equations" in p for p in problems) and any("family" in p for p in problems)
    assert any("state_names" in p for p in problems)  # the default ("h",) for two state tensors

    Bare.size_options = {"depth": Fraction(1, 2), "width": 0.5}
    problems = knowledge_problems(Bare, Bare(3, 4))
    assert any("'depth', not an option" in p for p in problems)
    assert any("size_options['width'] = 0.5" in p for p in problems)


@pytest.mark.parametrize("name", list_cells())
def test_implementation_is_the_same_switch_on_every_cell(name):
    variant = VARIANTS[name][0]
    cell = _build(name, variant).double().eval()
    assert cell.implementation == "fast"
    x = torch.randn(2, 4, cell.input_size, dtype=F64)
    reference = cell.forward_reference(x)[0]
    torch.testing.assert_close(cell(x)[0], reference)
    cell.implementation = "reference"
    torch.testing.assert_close(cell(x)[0], reference, rtol=0, atol=0)
    with pytest.raises(CellOptionError, match="implementation must be one of 'fast', 'reference'"):
        cell.implementation = "turbo"
    # the same name as a cell option, for every cell (recipes: cell_options: {implementation: reference})
    from dsf_lightning.cells import build_cell

    size = variant[2] if len(variant) > 2 else 5
    built = build_cell(name, size, size if name == "ran-simple" else 6, **variant[1], implementation="reference")
    assert built.implementation == "reference"


@pytest.mark.parametrize("name", [n for n in list_cells() if get_cell(n).jacobian_form is not None])
def test_closed_form_jacobian_norm_is_the_frobenius_norm_of_the_step_jacobian(name):
    """SCRN paper eq. 10's per-step term ``||d h_t / d h_(t-1)||_F^2``, from the Jacobian of one step of
    ``recur`` (the other state tensors held fixed), per sequence, in float64."""
    cell = _build(name, VARIANTS[name][0]).double().eval()
    assert type(cell).closed_form_jacobian() == cell.jacobian_form
    with torch.no_grad():
        for p in cell.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    k = cell.recurrent_state_index
    x = torch.randn(3, cell.input_size, dtype=F64)
    state = tuple(torch.rand(3, n, dtype=F64) for n in cell.state_sizes)
    projected = cell.project_inputs(x)
    _, new_state = cell.recur(projected, state)
    expected = []
    for b in range(3):
        def step(h, b=b):
            full = [s[b : b + 1] for s in state]
            full[k] = h.unsqueeze(0)
            return cell.recur(projected[b : b + 1], tuple(full))[1][k].squeeze(0)

        expected.append(torch.autograd.functional.jacobian(step, state[k][b]).pow(2).sum())
    got = cell.jacobian_norm(new_state)
    torch.testing.assert_close(got.expand(3), torch.stack(expected))


def test_a_subclass_that_changes_recur_loses_the_closed_form():
    scrn = get_cell("scrn")

    class Changed(scrn):
        def recur(self, projected_t, state, state_masks=None):
            return super().recur(2 * projected_t, state, state_masks)

    assert scrn.closed_form_jacobian() == "step"
    assert Changed.closed_form_jacobian() is None
