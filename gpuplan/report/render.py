"""A ``Report`` as HTML (one file, figures as base64 data URIs, no script, no external link
that it needs) or as Markdown (the same figures as data-URI images)."""

from __future__ import annotations

import base64
import html

from gpuplan.report import FirstPage, Report, Table

STYLE = """body{font-family:sans-serif;max-width:70em;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#eee}img{max-width:100%}
.headline td:last-child{font-weight:bold}
.first-page{page-break-after:always;border-bottom:2px solid #444;padding-bottom:1em;margin-bottom:2em}
.question{font-style:italic;font-size:1.1em}.answer{font-size:1.5em;font-weight:bold;margin:.6em 0}"""


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _html_table(t: Table, css: str = "") -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in row) + "</tr>" for row in t.rows)
    cls = f' class="{css}"' if css else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_page(report: Report) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{e(report.title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{e(report.title)}</h1>"]  # fmt: skip
    if report.first_page is not None:
        parts.append(_html_first_page(report.first_page))
        parts.append("<h2>Detail</h2>")
    if report.headline:
        parts.append(_html_table(Table(columns=("figure", "value"), rows=report.headline),
                                 "headline"))  # fmt: skip
    for s in report.sections:
        parts.append(f"<h2>{e(s.title)}</h2>")
        parts += [f"<p>{e(p)}</p>" for p in s.paragraphs]
        parts += [_html_table(t) for t in s.tables]
        parts += [f'<figure><img alt="{e(f.title)}" src="{data_uri(f.png)}">'
                  f"<figcaption>{e(f.title)}</figcaption></figure>" for f in s.figures]  # fmt: skip
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _html_first_page(fp: FirstPage) -> str:
    e = html.escape
    levers = "".join(f"<li>{e(x)}</li>" for x in fp.levers)
    return (f'<section class="first-page"><p class="question">{e(fp.question)}</p>'
            f'<p class="answer">{e(fp.answer)}</p>'
            + _html_table(Table(columns=("figure", "value"), rows=fp.figures), "headline")
            + f"<p><b>How sure:</b> {e(fp.band)}</p><p><b>Top changes the diagnosis finds"
            f"</b></p><ol>{levers}</ol></section>")  # fmt: skip


def _md_first_page(fp: FirstPage) -> list[str]:
    return [f"*{fp.question}*", "", f"**{fp.answer}**", "",
            *_md_table(Table(columns=("figure", "value"), rows=fp.figures)),
            f"How sure: {fp.band}", "", "Top changes the diagnosis finds:", "",
            *(f"{k}. {x}" for k, x in enumerate(fp.levers, 1)), "", "## Detail", ""]  # fmt: skip


def _md_cell(v: str) -> str:
    return v.replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> list[str]:
    return ["| " + " | ".join(map(_md_cell, t.columns)) + " |",
            "|" + "---|" * len(t.columns),
            *("| " + " | ".join(map(_md_cell, r)) + " |" for r in t.rows), ""]  # fmt: skip


def markdown(report: Report) -> str:
    lines = [f"# {report.title}", ""]
    if report.first_page is not None:
        lines += _md_first_page(report.first_page)
    if report.headline:
        lines += _md_table(Table(columns=("figure", "value"), rows=report.headline))
    for s in report.sections:
        lines += [f"## {s.title}", ""]
        for p in s.paragraphs:
            lines += [p, ""]
        for t in s.tables:
            lines += _md_table(t)
        for f in s.figures:
            lines += [f"![{f.title}]({data_uri(f.png)})", ""]
    return "\n".join(lines)
