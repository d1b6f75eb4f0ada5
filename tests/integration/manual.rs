//! The manual: README.md and the pages under docs/. Every relative link names a file of the
//! repository, and every `#anchor` a heading of the page it points to (as GitHub makes
//! anchors: lower case, punctuation dropped, spaces as hyphens). No file of the repository cites
//! a document outside it ("SPEC"): the code and the packages point at the manual.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages
}

fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (outside fenced code).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            let heading = line.trim_start_matches('#');
            if heading.starts_with(' ') {
                out.insert(slug(heading));
            }
        }
    }
    out
}

/// The targets of the page's Markdown links `[text](target)` (outside fenced code).
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    out
}

#[test]
fn every_link_of_the_manual_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match link.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let text = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&text).contains(anchor) {
                    broken.push(format!("{}: {link} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 50, "only {checked} links checked");
}

/// The README stays a README (the manual is in docs/) and opens with the two commands; the
/// manual is the reference, so no page of it, and no file of the code, cites a document
/// outside the repository.
#[test]
fn the_readme_stays_a_readme_and_the_manual_is_the_reference() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.lines().count() < 400,
        "README.md grew back into a manual"
    );
    let first_block: Vec<&str> = readme.split("```").nth(1).unwrap().lines().collect();
    assert!(first_block[1].starts_with("make run "), "{first_block:?}");
    assert!(first_block[2].starts_with("make test "), "{first_block:?}");
    // The code too: its comments point at the manual, not at a document outside the repository.
    let mut files = pages();
    let mut folders: Vec<PathBuf> = [
        "src",
        "algorithms",
        "tests",
        "scripts",
        "examples",
        "clients",
        "gateway",
        "gateway-server",
        "prometheus",
    ]
    .iter()
    .map(|f| root().join(f))
    .collect();
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(
                    name.as_str(),
                    "node_modules" | ".venv" | "target" | "__pycache__" | ".mypy_cache" | "dist"
                ) {
                    folders.push(path);
                }
            } else if path != root().join("tests/integration/manual.rs")
                && [
                    ".rs", ".py", ".sh", ".lua", ".js", ".cjs", ".mjs", ".ts", ".toml", ".txt",
                    ".json", ".md", ".yaml", ".yml",
                ]
                .iter()
                .any(|ext| name.ends_with(ext))
            {
                files.push(path);
            }
        }
    }
    files.push(root().join("Makefile"));
    for page in files {
        let text = std::fs::read_to_string(&page).unwrap();
        let cites = text.match_indices("SPEC").any(|(at, _)| {
            !text[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric())
        });
        assert!(!cites, "{} cites a SPEC", page.display());
    }
}
