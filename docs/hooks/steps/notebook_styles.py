"""Build step: a notebook page keeps only the CSS rules that can match it.

mkdocs-jupyter inlines JupyterLab's whole stylesheet (575 KB, 3,173 rules) in every notebook page, and a phone
parses all of it before it shows the page. Every rule is scoped to the notebook (`.jupyter-wrapper ...`) and
the page is static, so a rule can only ever match if each class its selector requires is on the page: the
others are dropped. So are rules for `:root` nested under the wrapper, which match nothing (among them 80 KB of
icon variables). `:not(...)` never requires a class. Measured on the playground page: its HTML from 847 KB to
307 KB, identical screenshots at 390 px in both colour schemes.
"""

from __future__ import annotations

import re

import tinycss2

STYLE = re.compile(r"(<style[^>]*>)(.*?)(</style>)", re.DOTALL)
CLASS_ATTRIBUTE = re.compile(r'class="([^"]*)"')
REQUIRED_CLASS = re.compile(r"\.(-?[_a-zA-Z][\w-]*)")
NEGATION = re.compile(r":not\([^)]*\)")
NESTED_ROOT = re.compile(r"\S\s+:root")
GROUPING_RULES = {"media", "supports"}


def without_unused_css(html: str) -> str:
    """Drop the rules of a page's inline stylesheets that no element of the page can match."""
    classes = {name for names in CLASS_ATTRIBUTE.findall(html) for name in names.split()}

    def pruned(style: re.Match[str]) -> str:
        rules = tinycss2.parse_stylesheet(style[2], skip_whitespace=True, skip_comments=True)
        return style[1] + tinycss2.serialize(used_rules(rules, classes)) + style[3]

    return STYLE.sub(pruned, html)


def used_rules(rules: list, classes: set[str]) -> list:
    """The rules of which some selector needs only classes in `classes`; @media and @supports pruned inside."""
    kept = []
    for rule in rules:
        if rule.type == "qualified-rule":
            if any(
                _can_match(selector, classes)
                for selector in tinycss2.serialize(rule.prelude).split(",")
            ):
                kept.append(rule)
        elif rule.type == "at-rule" and rule.lower_at_keyword in GROUPING_RULES and rule.content:
            inner = tinycss2.parse_rule_list(rule.content, skip_whitespace=True, skip_comments=True)
            rule.content = used_rules(inner, classes)
            if rule.content:
                kept.append(rule)
        elif rule.type == "at-rule":
            kept.append(rule)  # @font-face, @keyframes, @charset: kept whole
    return kept


def _can_match(selector: str, classes: set[str]) -> bool:
    required = set(REQUIRED_CLASS.findall(NEGATION.sub("", selector)))
    return required <= classes and not NESTED_ROOT.search(selector)
