"""A bundle whose manifest is valid JSON but not an object (a list, a number) is
answered INVALID with what it is, exit 2, not a traceback."""

import json
import zipfile

import pytest

from audit import offline_verify


@pytest.mark.parametrize("manifest", [[], [1, 2], 7, "manifest", None])
def test_a_zip_whose_manifest_is_not_an_object(tmp_path, capsys, manifest):
    path = tmp_path / "bundle.zip"
    with zipfile.ZipFile(path, "w") as bundle:
        bundle.writestr("manifest.json", json.dumps(manifest))
        bundle.writestr("events.csv", "seq,hash\n")
    assert offline_verify.main([str(path)]) == 2
    out = capsys.readouterr().out
    assert out.startswith("INVALID: cannot read") and "not the bundle's manifest (an object)" in out


@pytest.mark.parametrize("first", ["[]", "[1]", '"x"'])
def test_a_jsonl_whose_first_line_is_not_an_object(tmp_path, capsys, first):
    path = tmp_path / "bundle.jsonl"
    path.write_text(first + "\n")
    assert offline_verify.main([str(path)]) == 2
    assert "line 1 is not the bundle's manifest" in capsys.readouterr().out
