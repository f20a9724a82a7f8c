"""``bench.face_churn`` on a real large-lam fit: every face the Newton steps solved, each
against the face before, ending on the optimum's face, and the optimum's effective dimension
(docs/design-notes.md, "Why a large-lam fit factors several faces")."""

from __future__ import annotations

import re

import pytest

from bench.face_churn import main


def test_the_faces_end_on_the_optimum_and_each_is_counted_against_the_last(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dataset", "svmguide1", "--rows", "1500", "--lam", "1e6", "--theta",
                 "0.2"]) == 0
    out = capsys.readouterr().out
    optimum = int(re.search(r"the optimum's face (\d+) rows", out).group(1))
    faces = re.findall(r"face +(\d+) rows, +(\d+) on the optimum's face \((factored|from the "
                       r"factor)\)(?:: (\d+) removed, (\d+) added)?", out)
    assert len(faces) >= 2, out
    assert faces[0][2] == "factored" and faces[0][3] == ""  # the first has no face before
    changes = [(int(before[0]), int(removed), int(added))
               for before, (_, _, _, removed, added) in zip(faces, faces[1:], strict=False)]
    assert all(removed <= rows_before for rows_before, removed, _ in changes)
    assert sum(removed + added for _, removed, added in changes) > 0  # large lam: faces churn
    last_rows, last_on = int(faces[-1][0]), int(faces[-1][1])
    assert last_rows == last_on == optimum  # the last face solved is the optimum's
    d_effs = re.findall(r"effective dimension at the \w+ side's D = \S+: (\d+) of (\d+)", out)
    assert len(d_effs) == 2, out
    for d_eff, of in d_effs:
        assert 0 < int(d_eff) < int(of) == optimum
    assert len(re.findall(r"lam \S+: \d+ rows, \d+ on the same side", out)) == 2


def test_the_recording_leaves_the_solver_as_it_was(capsys: pytest.CaptureFixture[str]) -> None:
    from solver.exact.newton_kernel import FaceSystems

    solve = FaceSystems.solve
    main(["--dataset", "svmguide1", "--rows", "600", "--lam", "1e6", "--theta", "0.2"])
    capsys.readouterr()
    assert FaceSystems.solve is solve
