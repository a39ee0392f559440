"""Reading input files with errors that name the file and the line (rlscale.inputs)."""

import pytest

from rlscale import inputs


@pytest.mark.parametrize("data, encoding, message", [
    (b"ok\n\xe9t\xe9\n", "utf-8", "f.txt:2: not valid UTF-8 (byte 0xe9 at column 1)"),
    (b"\xef\xbb\xbfab\x80", "utf-8-sig", "f.txt:1: not valid UTF-8 (byte 0x80 at column 3)"),
    (b"a\r\n\xc3\xa9\xc3\n", "utf-8", "f.txt:2: not valid UTF-8 (byte 0xc3 at column 2)"),
])
def test_decode_utf8_names_line_and_column(data, encoding, message):
  with pytest.raises(ValueError) as e:
    inputs.decode_utf8(data, "f.txt", encoding=encoding)
  assert str(e.value) == message + ("; convert the file to UTF-8 (e.g. iconv -f <its encoding> "
                                    "-t utf-8)")
  assert inputs.decode_utf8("é\n".encode(), "f.txt") == "é\n"
  assert inputs.decode_utf8(b"\xef\xbb\xbfa", "f.txt", encoding="utf-8-sig") == "a"


def test_read_json_names_file_line_and_column(tmp_path):
  path = tmp_path / "config.json"
  path.write_bytes(b'{\n  "a": 1,\n  "b": }\n')
  with pytest.raises(ValueError) as e:
    inputs.read_json(path)
  assert str(e.value) == f"{path}:3:8: not valid JSON (Expecting value)"
  path.write_bytes(b'{"a": "\xe9"}')
  with pytest.raises(ValueError, match=r"config.json:1: not valid UTF-8 \(byte 0xe9 at column 8\)"):
    inputs.read_json(path)
  path.write_text('{"a": [1, 2]}', encoding="utf-8")
  assert inputs.read_json(path) == {"a": [1, 2]}
