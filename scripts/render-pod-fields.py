#!/usr/bin/env python3
"""Render nodeagent/podfields.yaml into the generated part of docs/pod-fields.md (tests/unit/test_podfields.py
fails while the page and the table disagree). Usage: python3 scripts/render-pod-fields.py"""

from __future__ import annotations

from pathlib import Path

from nodeagent import podfields

PAGE = Path(__file__).resolve().parents[1] / "docs" / "pod-fields.md"


def main() -> None:
    page = PAGE.read_text(encoding="utf-8")
    PAGE.write_text(
        podfields.splice_generated(page, podfields.render_markdown(podfields.load_table())), encoding="utf-8"
    )


if __name__ == "__main__":
    main()
