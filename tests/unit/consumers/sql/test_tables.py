"""Which reflected MariaDB/MySQL columns take their strings as UTF-8 in hexadecimal."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from consumers.sql.tables import utf8_text


@pytest.mark.parametrize(("column_type", "default", "width"), [
    (mysql.CHAR(3), "utf8mb4", 4),
    (mysql.VARCHAR(5), "utf8mb3", 3),
    (mysql.VARCHAR(5), "utf8", 3),
    (mysql.VARCHAR(5), "latin1", 0),
    (mysql.VARCHAR(5, charset="latin1"), "utf8mb4", 0),
    (mysql.TEXT(charset="utf8mb3"), "utf8mb4", 3),
    (mysql.VARCHAR(5, charset="UTF8MB4"), "latin1", 4),
    (mysql.TINYTEXT(), "utf8mb4", 4),
    (mysql.MEDIUMTEXT(), "utf8mb4", 4),
    (mysql.LONGTEXT(charset="utf8mb4", collation="utf8mb4_bin"), None, 4),  # MariaDB JSON
    (mysql.NCHAR(3), "utf8mb4", 3),
    (mysql.CHAR(3), None, 0),
    (mysql.ENUM("x"), "utf8mb4", 0),
    (mysql.SET("a"), "utf8mb4", 0),
    (mysql.VARBINARY(4), "utf8mb4", 0),
    (mysql.BLOB(), "utf8mb4", 0),
    (mysql.JSON(), "utf8mb4", 0),
    (sa.INTEGER(), "utf8mb4", 0),
])
def test_only_text_columns_in_a_utf8_character_set_are_marked(
        column_type: sa.types.TypeEngine[object], default: str | None, width: int) -> None:
    assert utf8_text(column_type, default) == width
