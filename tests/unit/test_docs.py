"""The documentation site builds without a warning, its configuration reference is the
code's, and the README stays a front page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trep.config_reference import reference_markdown, sections

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict_with_the_generated_reference(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"}, cwd=ROOT)
    assert built.returncode == 0, built.stdout + built.stderr
    page = (tmp_path / "site" / "configuration" / "index.html").read_text()
    for needed in ("foreign_keys", "schema_changes", "fragment_rows", "bootstrap_servers",
                   "zero_dates"):
        assert needed in page, needed


def test_the_reference_covers_every_section_and_says_what_each_setting_does() -> None:
    text = reference_markdown()
    titles = [s.title for s in sections()]
    for kind in ("sql", "elasticsearch", "mongodb", "warehouse", "changes"):
        assert f"`consumers.<name>.target` with `type: {kind}`" in titles, kind
    assert "| `foreign_keys` | `follow` \\| `ignore` | `'follow'` | What the group does" in text


def test_the_readme_is_a_front_page_and_links_to_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert readme.index("make demo") < readme.index("make test") < 1500
    for link in ("docs/getting-started.md", "docs/configuration.md", "docs/status.md",
                 "docs/targets/sql.md", "docs/schema-changes.md"):
        assert f"]({link})" in readme and (ROOT / link).exists(), link
