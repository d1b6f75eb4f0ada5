#!/usr/bin/env python3
"""`make lint` and `make test`: every commit since the rule (CONTRIBUTING.md, Commits) has a
subject of at most 72 characters and a body that says why.

The commits up to d23e3ff were written before the rule and are not read. A clone without
them (a shallow one) checks the commits it has; a folder that is not a git checkout (a
release's source) has none to check. Merge commits are left out (git writes their subject).
"""

import os
import subprocess
import sys

SINCE = "d23e3ffb0d22a24016c234504e281cc5e14a8ccb"
LIMIT = 72


def git(*args):
    return subprocess.run(["git", *args], cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          capture_output=True, text=True)


def main():
    if git("rev-parse", "--verify", "-q", "HEAD").returncode != 0:
        print("commits: not a git checkout, nothing to check")
        return 0
    known = git("cat-file", "-e", SINCE + "^{commit}").returncode == 0
    # %x1e ends a commit, %x1f parts it: hash, subject, body.
    log = git("log", "--no-merges", "--format=%h%x1f%s%x1f%b%x1e", f"{SINCE}..HEAD" if known else "HEAD")
    if log.returncode != 0:
        sys.exit(f"commits: git log failed: {log.stderr.strip()}")
    bad = []
    count = 0
    for record in log.stdout.split("\x1e"):
        record = record.strip("\n")
        if not record:
            continue
        count += 1
        short, subject, body = record.split("\x1f", 2)
        if len(subject) > LIMIT:
            bad.append(f"{short}: a subject of {len(subject)} characters, more than {LIMIT}: {subject}")
        if not body.strip():
            bad.append(f"{short}: no body (say why in it): {subject}")
    for line in bad:
        print(f"commits: {line}", file=sys.stderr)
    if bad:
        print("commits: see CONTRIBUTING.md, Commits; `git commit --amend` or `git rebase -i` mends them",
              file=sys.stderr)
        return 1
    print(f"commits: {count} read, each a subject of at most {LIMIT} characters and a body"
          + ("" if known else f" ({SINCE[:7]} not in this clone: all of its commits read)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
