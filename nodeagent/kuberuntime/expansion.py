"""`$(VAR)` expansion in env values, command and args (upstream: third_party/forked/golang/expansion).

`$(NAME)` is replaced by the value of NAME when it is known and left as written otherwise; `$$` is a literal `$`
(so `$$(NAME)` yields `$(NAME)`); any other `$` is kept, including an unclosed `$(`.
"""

from __future__ import annotations

from collections.abc import Mapping


def expand(text: str, env: Mapping[str, str]) -> str:
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        char = text[i]
        if char != "$" or i + 1 >= n:
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            close = text.find(")", i + 2)
            if close == -1:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : close]
                out.append(env.get(name, f"$({name})"))
                i = close + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)
