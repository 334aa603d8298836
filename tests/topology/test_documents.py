"""One reading path for user documents: errors name the file, the key path (list items by name) and the problem."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from topology._documents import describe_validation_error, key_path, load_yaml_model, read_yaml_file, read_yaml_text


class DocError(ValueError):
    pass


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str | None = None
    gpu_count: int = Field(default=1, ge=1, alias="gpuCount")


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[Item] = []
    mode: str = "a"

    @model_validator(mode="after")
    def _known_mode(self) -> Doc:
        if self.mode not in ("a", "b"):
            raise ValueError(f"mode {self.mode!r} is not a or b")
        return self


def problems(data: object) -> list[str]:
    with pytest.raises(ValidationError) as err:
        Doc.model_validate(data)
    return describe_validation_error("doc.yaml", err.value, data).splitlines()


def test_list_items_are_named_as_written_else_by_index() -> None:
    data = {"items": [{"name": "rack-a", "gpuCount": 0}, {"gpuCount": "many"}, {"name": "rack-c", "colour": "red"}]}
    assert problems(data) == [
        "doc.yaml: items[rack-a].gpuCount: expected a number ≥ 1, got 0",
        "doc.yaml: items[1].gpuCount: expected a whole number, got 'many'",
        "doc.yaml: items[rack-c].colour: unknown key",
    ]


def test_an_unknown_key_of_a_known_schema_says_the_nearest_known_key_through_lists() -> None:
    data = {"items": [{"name": "rack-a", "gpuCont": 2}], "mdoe": "a"}
    with pytest.raises(ValidationError) as err:
        Doc.model_validate(data)
    assert describe_validation_error("doc.yaml", err.value, data, Doc).splitlines() == [
        "doc.yaml: items[rack-a].gpuCont: unknown key; did you mean 'gpuCount'? (known: gpuCount, name)",
        "doc.yaml: mdoe: unknown key; did you mean 'mode'? (known: items, mode)",
    ]


class Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    best_fit: bool = Field(default=False, alias="bestFit")
    idle: Literal["weigh", "take"] = "weigh"
    seconds: int = 0
    share: float = Field(default=0.5, gt=0, le=1)
    levels: list[str] = []


@pytest.mark.parametrize(("data", "line"), [
    ({"bestFit": "maybe"}, "knobs.yaml: bestFit: expected true or false, got 'maybe'"),
    ({"idle": "grab"}, "knobs.yaml: idle: expected 'weigh' or 'take', got 'grab'"),
    ({"seconds": 1.5}, "knobs.yaml: seconds: expected a whole number, got 1.5"),
    ({"share": 0}, "knobs.yaml: share: expected a number > 0, got 0"),
    ({"share": 1.5}, "knobs.yaml: share: expected a number ≤ 1, got 1.5"),
    ({"share": "half"}, "knobs.yaml: share: expected a number, got 'half'"),
    ({"levels": "rack"}, "knobs.yaml: levels: expected a list, got 'rack'"),
])
def test_a_wrong_type_or_range_says_what_the_field_takes(data: dict[str, object], line: str) -> None:
    """The fix, from pydantic's error type and its bounds: what to write there, then what was written."""
    with pytest.raises(ValidationError) as err:
        Knobs.model_validate(data)
    assert describe_validation_error("knobs.yaml", err.value, data).splitlines() == [line]


def test_a_bad_key_of_a_mapping_is_named_as_a_key_under_its_mapping() -> None:
    """Pydantic locates a key that failed at ``(field, key, '[key]')``: the line names the mapping once
    and the key as what was given, not ``sizes.a.[key]: …, got 'a'``."""
    class Sizes(BaseModel):
        sizes: dict[int, float] = {}

    data = {"sizes": {"a": 1.0, 2: "x"}}
    with pytest.raises(ValidationError) as err:
        Sizes.model_validate(data)
    assert describe_validation_error("sizes.yaml", err.value, data).splitlines() == [
        "sizes.yaml: sizes: key 'a': expected a whole number",
        "sizes.yaml: sizes[2]: expected a number, got 'x'",
    ]


def test_a_missing_key_is_said_to_be_required() -> None:
    class Named(BaseModel):
        name: str

    with pytest.raises(ValidationError) as err:
        Named.model_validate({})
    assert describe_validation_error("named.yaml", err.value, {}) == "named.yaml: name: missing: a required key"


def test_a_whole_document_problem_has_no_key_path_and_no_value_error_prefix() -> None:
    assert problems({"mode": "z"}) == ["doc.yaml: mode 'z' is not a or b"]


def test_key_path_survives_data_that_does_not_match_the_location() -> None:
    assert key_path(("items", 3, "name"), {"items": []}) == "items[3].name"
    assert key_path(("a", 0), None) == "a[0]"
    assert key_path((), {"x": 1}) == ""


def test_unreadable_and_malformed_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(DocError, match=r"missing\.yaml: cannot read"):
        read_yaml_file(tmp_path / "missing.yaml", DocError)
    bad = tmp_path / "bad.yaml"
    bad.write_text("key: [unclosed\n")
    with pytest.raises(DocError, match=r"bad\.yaml: not valid YAML"):
        read_yaml_file(bad, DocError)
    with pytest.raises(DocError, match=r"^ConfigMap x: not valid YAML"):
        read_yaml_text("a: {", "ConfigMap x", DocError)
    good = tmp_path / "good.yaml"
    good.write_text("items: [{name: r}]\n")
    assert read_yaml_file(good, DocError) == {"items": [{"name": "r"}]}


def test_a_yaml_syntax_error_is_one_line_with_its_line_column_and_context() -> None:
    with pytest.raises(DocError) as caught:
        read_yaml_text("a: 1\nb: [2\nc: 3\n", "doc.yaml", DocError)
    assert str(caught.value) == ("doc.yaml: not valid YAML at line 3, column 2: expected ',' or ']', but got ':'"
                                 " (while parsing a flow sequence at line 2, column 4)")
    with pytest.raises(DocError, match=r"^doc\.yaml: not valid YAML at line 1, column 1: found character '\\t'"):
        read_yaml_text("\tx: 1\n", "doc.yaml", DocError)


def test_a_model_file_is_a_mapping_validated_with_every_problem_named(tmp_path: Path) -> None:
    path = tmp_path / "doc.yaml"
    path.write_text("items: [{name: a, gpuCount: 2}]\nmode: b\n")
    assert load_yaml_model(path, Doc, DocError, "items and mode") == Doc(items=[Item(name="a", gpu_count=2)], mode="b")
    path.write_text("- a list\n")
    with pytest.raises(DocError, match=r"doc\.yaml: expected a mapping with items and mode$"):
        load_yaml_model(path, Doc, DocError, "items and mode")
    path.write_text("items: [{name: a, gpuCount: 0}]\nmode: z\n")
    with pytest.raises(DocError) as err:
        load_yaml_model(path, Doc, DocError, "items and mode")
    assert str(err.value).splitlines() == [f"{path}: items[a].gpuCount: expected a number ≥ 1, got 0"]
