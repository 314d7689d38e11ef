# Priorities as an Enum, used to sort and label issues.
from enum import Enum


class Priority(Enum):
    P1 = 1
    P2 = 2
    P3 = 3


issues = unwrap(list_issues(opened_after="2026-11-24"))
ordered = sorted(issues, key=lambda i: Priority[i["priority"].upper()].value)
[(i["id"], Priority[i["priority"].upper()].name) for i in ordered[:4]]
