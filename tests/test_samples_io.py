"""hn.samples: CSV, JSONL, DataFrames and dicts become Samples; bad input is named by row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import harnessnb as hn


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(tmp_path: Path, rows: list[Any]) -> Path:
    lines = [json.dumps(row, ensure_ascii=False) + "\n" for row in rows]  # raw non-ASCII
    return _write(tmp_path, "s.jsonl", "".join(lines))


def test_a_csv_gives_samples_with_every_column_in_its_place(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "s.csv",
        "id,input,target,metadata,level\n"
        'q1,"add 2 and 2",4,"{""source"": ""gsm""}",easy\n'
        'q2,"a task\non two lines",007,,hard\n'
        ",no id here,,,\n",
    )
    got = hn.samples(path)
    assert [(s.id, s.input, s.target) for s in got] == [
        ("q1", "add 2 and 2", "4"),
        ("q2", "a task\non two lines", "007"),  # cells stay the text they were
        (hn.Sample("no id here").id, "no id here", None),  # an empty cell: none
    ]
    assert [dict(s.metadata) for s in got] == [
        {"source": "gsm", "level": "easy"},
        {"level": "hard"},
        {"level": ""},
    ]


def test_a_jsonl_file_gives_samples_with_files_and_metadata(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path,
        [
            {"input": "fix it", "target": "ok", "id": 7, "files": {"src/a.py": "x = 1\n"},
             "metadata": {"tags": ["py"]}, "difficulty": 3},
            {"input": "second", "target": 42},
        ],
    )
    first, second = hn.samples(str(path))
    assert (first.id, first.target, dict(first.files)) == ("7", "ok", {"src/a.py": "x = 1\n"})
    assert dict(first.metadata) == {"tags": ["py"], "difficulty": 3}
    assert (second.input, second.target) == ("second", "42")


def test_a_dataframe_and_dicts_give_the_same_samples_as_the_file(tmp_path: Path) -> None:
    rows = [{"input": "one", "target": "1", "id": "a"}, {"input": "two", "id": "b", "kind": "x"}]
    from_file = hn.samples(_jsonl(tmp_path, rows))
    frame = pd.DataFrame(rows)  # "target" of the second row is NaN, "kind" of the first
    from_frame = hn.samples(frame)
    assert from_frame[0] == from_file[0]
    assert (from_frame[1].target, dict(from_frame[1].metadata)) == (None, {"kind": "x"})
    assert hn.samples(iter(rows)) == from_file


def test_a_missing_input_column_is_refused_naming_the_columns_found(tmp_path: Path) -> None:
    path = _write(tmp_path, "s.csv", "question,answer\nwhat,that\n")
    with pytest.raises(hn.ConfigError, match=r"no 'input' column \(columns: \['question', "):
        hn.samples(path)
    with pytest.raises(hn.ConfigError, match=r"no 'input' column .*'prompt'"):
        hn.samples(pd.DataFrame({"prompt": ["x"]}))


# (file, its text as written, what the error must say): a bad line, cell or header
BAD_TEXT = [
    ("s.csv", "input,target\nok,1\nfine,2,3\n", r"s\.csv line 3: 3 cells, the header has 2"),
    ("s.csv", 'input,metadata\nok,"{""a"": 1}"\nx,{no\n', r"s\.csv line 3: metadata is not JSON"),
    ("s.csv", "input,metadata\nok,[1]\n", r"s\.csv line 2: metadata must be a JSON object"),
    ("s.csv", 'input,target\n"a\nb",1\n ,2\n', r"s\.csv line 4: a sample's input must be"),
    ("s.csv", "input,files\nx,{}\n", r"a CSV cannot carry 'files'"),
    ("s.csv", "input,input\nx,y\n", r"the header names \['input'\] more than once"),
    ("s.jsonl", '{"input": "a"}\n\n{"input": "b",}\n', r"s\.jsonl line 3: not JSON"),
    ("s.jsonl", '{"input": "a"}\n["b"]\n', r"line 2: a JSON object, not an array"),
]


@pytest.mark.parametrize(("name", "text", "wrong"), BAD_TEXT)
def test_a_bad_line_is_refused_naming_it(tmp_path: Path, name: str, text: str, wrong: str) -> None:
    with pytest.raises(hn.ConfigError, match=wrong):
        hn.samples(_write(tmp_path, name, text))


# (a row after a good one, what the error must say about the JSONL file's line 2)
BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    ({"target": "a"}, r"no 'input' \(keys: \['target'\]\)"),
    ({"input": "a", "target": 0.5}, "target must be text, not float 0.5"),
    ({"input": "a", "files": {"../x": "y"}}, "a sample's file must be a relative path"),
    ({"input": "a", "files": ["x"]}, "files must map relative paths to text, not list"),
    ({"input": "a", "k": 1, "metadata": {"k": 2}}, r"\['k'\] both a column and a key"),
]


@pytest.mark.parametrize(("row", "wrong"), BAD_VALUES)
def test_a_bad_value_is_refused_naming_its_row(
    tmp_path: Path, row: dict[str, Any], wrong: str
) -> None:
    with pytest.raises(hn.ConfigError, match=r"s\.jsonl line 2: " + wrong):
        hn.samples(_jsonl(tmp_path, [{"input": "fine"}, row]))
    with pytest.raises(hn.ConfigError, match=r"samples: row 2: " + wrong):
        hn.samples([{"input": "fine"}, row])


def test_two_rows_with_one_id_are_refused_naming_both(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [{"input": "a", "id": "x"}, {"input": "b"}, {"input": "c", "id": "x"}])
    with pytest.raises(hn.ConfigError, match=r"line 3 has id 'x', as .*line 1 does"):
        hn.samples(path)
    same_input = [{"input": "same"}, {"input": "same"}]
    with pytest.raises(hn.ConfigError, match=r"row 2 has id '[0-9a-f]{12}', as row 1 does"):
        hn.samples(same_input)


@pytest.mark.parametrize("text", ["", "\n  \n", "input,target\n"])
def test_an_empty_file_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(hn.ConfigError, match=r"is empty|holds no samples"):
        hn.samples(_write(tmp_path, "s.csv", text))
    with pytest.raises(hn.ConfigError, match=r"is empty|holds no samples"):
        hn.samples(_write(tmp_path, "s.jsonl", text if "," not in text else "\n"))
    with pytest.raises(hn.ConfigError, match="holds no samples"):
        hn.samples([])


def test_a_missing_file_or_another_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(hn.ConfigError, match="no such file"):
        hn.samples(tmp_path / "gone.csv")
    with pytest.raises(hn.ConfigError, match=r"not a \.csv, \.jsonl or \.ndjson file"):
        hn.samples(_write(tmp_path, "s.txt", "input\nx\n"))
    with pytest.raises(hn.ConfigError, match="not int"):
        hn.samples(3)  # type: ignore[arg-type]
    with pytest.raises(hn.ConfigError, match=r"row 1: a dict, not str"):
        hn.samples(["input"])  # type: ignore[list-item]


def test_a_spreadsheet_csv_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_bytes("input,target\r\nx,1\r\n".encode("utf-8-sig"))
    assert [(s.input, s.target) for s in hn.samples(path)] == [("x", "1")]


def test_a_line_separator_inside_a_cell_or_a_json_string_stays_in_it(tmp_path: Path) -> None:
    text = "first\u2028second\x85third\x1cfourth"
    csv_file = _write(tmp_path, "s.csv", f"input,target\n{text},1\nnext,2\n")
    jsonl_file = _jsonl(tmp_path, [{"input": text, "target": "1"}, {"input": "next"}])
    for path in (csv_file, jsonl_file):
        assert [s.input for s in hn.samples(path)] == [text, "next"]


def test_loading_samples_keeps_import_harnessnb_light(tmp_path: Path) -> None:
    path = _write(tmp_path, "s.csv", "input\nx\n")
    code = (
        "import sys, harnessnb as hn; hn.samples(sys.argv[1]); "
        "print(','.join(m for m in ('pandas', 'duckdb', 'httpx2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == ""
