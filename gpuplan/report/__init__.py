"""Cost-estimation reports: the JSON documents of ``train``, ``serve`` or ``cluster`` (and the
diagnosis of the setup) as one self-contained HTML or Markdown file.

A ``Report`` is sections of prose, tables (cells already formatted) and figures (PNG bytes);
``render.html`` embeds each figure as a base64 ``data:`` URI so the file opens offline, and
``render.markdown`` does the same with Markdown image links. ``headline`` lists the numbers
the report must show, as they are printed (the tests look for each one in the page).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FigurePng:
    title: str
    png: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    title: str
    paragraphs: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    figures: tuple[FigurePng, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FirstPage:
    """The page read first (``report.first_page``): the question, the answer, its costs, its
    band and the three changes worth most."""

    question: str
    answer: str
    figures: tuple[tuple[str, str], ...]  # (label, value with its unit)
    band: str
    levers: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    title: str
    sections: tuple[Section, ...]
    headline: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (label, value)
    first_page: FirstPage | None = None
