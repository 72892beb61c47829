"""Series names a PromQL expression reads (enough PromQL for the deploy
artefacts' expressions: selectors, functions, aggregations, binary ops)."""
import re

_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan"}


def series_names(expr):
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)           # strings
    text = re.sub(r"\{[^}]*\}", "", text)                      # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)                     # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        name = match.group(0)
        following = text[match.end():].lstrip()
        if following.startswith("(") or name.lower() in _KEYWORDS:
            continue
        if re.fullmatch(r"\d*e\d*", name):
            continue
        names.add(name)
    return names
