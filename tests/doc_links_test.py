"""Every link of the documentation (README.md, python/README.md, docs/*.md) that is not a web address
names a file of the repository that exists, and its #anchor a heading of that file (GitHub's
anchors: lower case, punctuation dropped, spaces to hyphens). A newcomer who follows a link must
not land outside the checkout or on nothing.
    python3 tests/doc_links_test.py REPO_ROOT"""
import re
import sys
from pathlib import Path

LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchors(md: Path):
    text = FENCE.sub("", md.read_text(encoding="utf-8"))
    out, seen = set(), {}
    for h in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        h = re.sub(r"`|\*\*|\*|\[([^\]]*)\]\([^)]*\)", r"\1", h)
        slug = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def main(root: Path):
    docs = [root / "README.md", root / "python" / "README.md", *sorted((root / "docs").glob("*.md"))]
    bad, n = [], 0
    for md in docs:
        text = FENCE.sub("", md.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            n += 1
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md.resolve()
            where = f"{md.relative_to(root)}: ({target})"
            if root.resolve() not in dest.parents and dest != root.resolve():
                bad.append(f"{where} points outside the repository")
            elif not dest.exists():
                bad.append(f"{where}: {path} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{where}: no heading #{anchor} in {dest.relative_to(root.resolve())}")
    for b in bad:
        print("FAIL:", b)
    print(f"doc_links_test: {n} links in {len(docs)} files, {len(bad)} broken")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])))
