//! The guides show the files CI runs, not copies that drift: each block marked
//! `<!-- include: PATH -->` in README.md or docs/*.md is that file of the repository,
//! byte for byte, and docs/first-agent.md's `[dependencies]` are the README's
//! dependency block (the one scripts/first-agent-tests.sh builds a crate from).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages
}

/// The body of the fenced block that starts on the line after `marker`.
fn block_after<'a>(text: &'a str, marker: &str, page: &Path) -> &'a str {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("{}: no {marker}", page.display()));
    let rest = &text[at + marker.len()..];
    let fence = rest
        .find("```")
        .unwrap_or_else(|| panic!("{}: no block after {marker}", page.display()));
    let body = &rest[fence..];
    let body = &body[body.find('\n').unwrap() + 1..];
    &body[..body.find("\n```").map_or(0, |end| end + 1)]
}

#[test]
fn included_blocks_are_the_files_they_name() {
    let mut found = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (at, _) in text.match_indices("<!-- include: ") {
            let name = &text[at + "<!-- include: ".len()..];
            let name = name[..name.find(" -->").unwrap()].trim();
            let marker = format!("<!-- include: {name} -->");
            let shown = block_after(&text, &marker, &page);
            let file = std::fs::read_to_string(root().join(name)).unwrap();
            assert!(
                shown == file,
                "{}: the block after {marker} is not {name} as committed: copy the file into the page",
                page.display()
            );
            found += 1;
        }
    }
    assert!(
        found >= 2,
        "{found} included blocks: were the markers removed?"
    );
}

#[test]
fn the_guide_depends_on_what_the_readme_says() {
    let readme_path = root().join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let dependencies = block_after(&readme, "<!-- dependency: path form -->", &readme_path);
    assert!(
        dependencies.starts_with("[dependencies]\nkeel = { path = "),
        "{dependencies}"
    );
    assert!(
        dependencies.contains("features = [\"openai\"]"),
        "{dependencies}"
    );
    let guide_path = root().join("docs/first-agent.md");
    let guide = std::fs::read_to_string(&guide_path).unwrap();
    assert!(
        guide.contains(&format!("```toml\n{dependencies}```")),
        "docs/first-agent.md's [dependencies] differ from the README's block:\n{dependencies}"
    );
}
