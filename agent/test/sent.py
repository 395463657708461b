#!/usr/bin/env python3
"""What the server received: the parameters of each call of one frameq
function, from a server log written with log_statement = 'all'.

    sent.py SERVER_LOG FUNCTION

prints one JSON array per call (NULL as null), oldest first.  The server
logs an extended-protocol statement as "execute <unnamed>: SQL" with a
"DETAIL:  parameters: $1 = '...', ..." line in the same message; quotes in
a value are doubled.
"""
import json
import re
import sys

PARAM = re.compile(r"\$(\d+) = (NULL|'((?:[^']|'')*)')(?:, |$)")


def params(text):
    out = []
    pos = 0
    while pos < len(text):
        m = PARAM.match(text, pos)
        if not m:
            break
        out.append(None if m.group(2) == "NULL" else m.group(3).replace("''", "'"))
        pos = m.end()
    return out


def main():
    log, function = sys.argv[1], sys.argv[2]
    call = "frameq.%s(" % function
    with open(log, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if "execute <unnamed>: " not in line or call not in line:
            continue
        for detail in lines[i + 1:i + 3]:
            if "DETAIL:  parameters: " in detail:
                print(json.dumps(params(detail.split("DETAIL:  parameters: ", 1)[1]),
                                 ensure_ascii=False))
                break


main()
