//! Every repository path the prose names must exist.
//!
//! Scans README.md, CONTAINER.md and docs/*.md whole, and the comments (doc
//! comments included) of the Rust sources under src/, tools/ and tests/, of
//! hack/*.sh and of the Makefile. A token counts as a path when it starts with
//! one of the repository's top-level directories (`TOP_DIRS`) or is one of its
//! top-level files (`TOP_FILES`, or any upper-case Markdown name). Trailing
//! punctuation and `:line` suffixes are dropped; a glob (`*`), or a name
//! completed by a placeholder (`<name>`, `${VAR}`), only needs the directory
//! before it. The test lists every named path that is neither a file nor a
//! directory, with where it is named.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level directories of the repository: a token starting with one of these
/// is a path.
const TOP_DIRS: &[&str] = &["src/", "tools/", "tests/", "hack/", "config/", "helm-charts/", "docs/", "bundle/"];

/// Top-level files a text may name without a directory.
const TOP_FILES: &[&str] = &["README.md", "CONTAINER.md", "Makefile", "Dockerfile", "Cargo.toml"];

/// Paths the texts name that a command creates at run time, so they need not
/// be in a checkout. Empty: every path named today is committed.
const CREATED_AT_RUN_TIME: &[&str] = &[];

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where the text to scan comes from in a file.
#[derive(Clone, Copy)]
enum Kind {
    /// Markdown: all of it.
    Prose,
    /// Rust: `//` and `/* */` comments only.
    Rust,
    /// Shell or make: `#` comments only.
    Hash,
}

/// The files to scan, relative to the repository root, with their kind.
fn files_to_scan(root: &Path) -> Vec<(PathBuf, Kind)> {
    let mut files = vec![
        (PathBuf::from("README.md"), Kind::Prose),
        (PathBuf::from("CONTAINER.md"), Kind::Prose),
        (PathBuf::from("Makefile"), Kind::Hash),
    ];
    for (dir, ext, kind) in [("docs", "md", Kind::Prose), ("hack", "sh", Kind::Hash)] {
        let mut found: Vec<PathBuf> = fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("reading {dir}: {e}"))
            .map(|entry| entry.expect("directory entry").path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == ext))
            .map(|p| p.strip_prefix(root).expect("under the root").to_path_buf())
            .collect();
        found.sort();
        files.extend(found.into_iter().map(|p| (p, kind)));
    }
    for dir in ["src", "tools", "tests"] {
        let mut found = Vec::new();
        rust_files(root, &root.join(dir), &mut found);
        found.sort();
        files.extend(found.into_iter().map(|p| (p, Kind::Rust)));
    }
    files
}

fn rust_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            // A build directory inside a member crate is no source.
            if path.file_name().is_some_and(|n| n != "target") {
                rust_files(root, &path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.strip_prefix(root).expect("under the root").to_path_buf());
        }
    }
}

/// The text of a Rust file's comments, other characters replaced by spaces so
/// that line numbers stay right (newlines are kept). String and character
/// literals are skipped, so a URL in a string is no comment.
fn rust_comments(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(chars[i]);
                    i += 1;
                }
            }
        } else if c == '"' {
            // An ordinary (or byte) string: up to the closing unescaped quote.
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    out.push(' ');
                    i += 1;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c == 'r' && raw_string_start(&chars, i).is_some() {
            let hashes = raw_string_start(&chars, i).expect("checked");
            // r, the hashes and the opening quote.
            for _ in 0..hashes + 2 {
                out.push(' ');
            }
            i += hashes + 2;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    for _ in 0..hashes + 1 {
                        out.push(' ');
                    }
                    i += hashes + 1;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'); otherwise a lifetime.
            if next == Some('\\') {
                out.push(' ');
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    if chars[i] == '\\' {
                        out.push(' ');
                        i += 1;
                    }
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                out.push_str("   ");
                i += 3;
            } else {
                out.push(' ');
                i += 1;
            }
        } else {
            out.push(blank(c));
            i += 1;
        }
    }
    out
}

/// At `chars[i] == 'r'`: the number of `#`s when a raw string starts there.
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    let before = i.checked_sub(1).map(|j| chars[j]);
    let ident_before = before.is_some_and(|b| b.is_alphanumeric() || b == '_');
    // `br"..."` is a raw byte string; any other identifier character before
    // the `r` makes it part of a name.
    if ident_before && before != Some('b') {
        return None;
    }
    if before == Some('b') {
        let before_b = i.checked_sub(2).map(|j| chars[j]);
        if before_b.is_some_and(|b| b.is_alphanumeric() || b == '_') {
            return None;
        }
    }
    let mut hashes = 0;
    while chars.get(i + 1 + hashes) == Some(&'#') {
        hashes += 1;
    }
    (chars.get(i + 1 + hashes) == Some(&'"')).then_some(hashes)
}

/// The text of a shell script's or Makefile's `#` comments, line by line
/// (other lines empty). A `#` starts a comment at the start of a line or after
/// a blank, outside quotes; `$#` and `${#x}` are no comments.
fn hash_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    for line in source.lines() {
        let mut quote: Option<char> = None;
        let mut prev = ' ';
        let mut start = None;
        for (at, c) in line.char_indices() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == '\'' || c == '"' => quote = Some(c),
                None if c == '#' && prev.is_whitespace() => {
                    start = Some(at);
                    break;
                }
                None => {}
            }
            prev = c;
        }
        if let Some(at) = start {
            out.push_str(&line[at..]);
        }
        out.push('\n');
    }
    out
}

/// Characters a path token is made of (`*` for globs).
fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '*')
}

/// A path the text names, as written (punctuation and `:line` stripped) and
/// whether a placeholder completes it (`config/samples/<name>.yaml`).
#[derive(Debug, PartialEq)]
struct Named {
    path: String,
    placeholder: bool,
}

/// The repository paths named on one line of text.
fn named_paths(line: &str) -> Vec<Named> {
    let chars: Vec<char> = line.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !path_char(chars[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && path_char(chars[i]) {
            i += 1;
        }
        // A token glued to a URL scheme, a `~`, a `$`, a `../` or an
        // identifier character is no repository-relative path.
        let before = start.checked_sub(1).map(|j| chars[j]);
        if before.is_some_and(|b| matches!(b, ':' | '~' | '$' | '@' | '\\')) {
            continue;
        }
        let token: String = chars[start..i].iter().collect();
        let token = token.trim_end_matches(['.', ',', ';', '-']);
        let placeholder = matches!(chars.get(i), Some('<' | '{' | '$'));
        if is_repo_path(token) {
            found.push(Named { path: token.to_string(), placeholder });
        }
    }
    found
}

fn is_repo_path(token: &str) -> bool {
    if TOP_DIRS.iter().any(|dir| token.starts_with(dir)) || TOP_FILES.contains(&token) {
        return true;
    }
    // Any upper-case Markdown file at the top, such as a changelog.
    token
        .strip_suffix(".md")
        .is_some_and(|stem| !stem.is_empty() && stem.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c == '-'))
}

/// Whether what `named` names is in the checkout under `root`.
fn exists(root: &Path, named: &Named) -> bool {
    if CREATED_AT_RUN_TIME.contains(&named.path.as_str()) {
        return true;
    }
    let fixed = match named.path.find('*') {
        Some(glob) => &named.path[..glob],
        None if named.placeholder => named.path.as_str(),
        None => return root.join(&named.path).exists(),
    };
    // A glob or placeholder: the directory before it must exist.
    let dir = match fixed.rfind('/') {
        Some(slash) => &fixed[..slash],
        None => "",
    };
    root.join(dir).is_dir()
}

#[test]
fn every_path_named_in_docs_and_comments_exists() {
    let root = repo_root();
    let mut dead = BTreeSet::new();
    let mut scanned = 0;
    for (file, kind) in files_to_scan(&root) {
        let source = fs::read_to_string(root.join(&file)).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let text = match kind {
            Kind::Prose => source,
            Kind::Rust => rust_comments(&source),
            Kind::Hash => hash_comments(&source),
        };
        scanned += 1;
        for (n, line) in text.lines().enumerate() {
            for named in named_paths(line) {
                if !exists(&root, &named) {
                    dead.insert(format!("{}:{}: {}", file.display(), n + 1, named.path));
                }
            }
        }
    }
    assert!(scanned > 50, "only {scanned} files scanned: the walk is broken");
    assert!(
        dead.is_empty(),
        "paths named in docs or comments that do not exist ({}):\n  {}",
        dead.len(),
        dead.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}

#[test]
fn tokens_are_trimmed_and_filtered() {
    let paths = |line: &str| -> Vec<String> { named_paths(line).into_iter().map(|n| n.path).collect() };
    assert_eq!(paths("see `src/a/b.rs:12`."), ["src/a/b.rs"]);
    assert_eq!(paths("(src/a.rs, tools/b.rs)."), ["src/a.rs", "tools/b.rs"]);
    assert_eq!(paths("read SPEC.md and README.md;"), ["SPEC.md", "README.md"]);
    assert_eq!(paths("https://example.com/src/x ../shared/src/y ~/docs/z $HOME/src/w"), Vec::<String>::new());
    assert_eq!(paths("mysrc/x.rs resources/a"), Vec::<String>::new());
    let named = named_paths("config/samples/tinycode_v1alpha1_<mode>.yaml");
    assert_eq!(named, [Named { path: "config/samples/tinycode_v1alpha1_".into(), placeholder: true }]);
}

#[test]
fn globs_and_placeholders_need_their_directory() {
    let root = repo_root();
    let named = |path: &str, placeholder| Named { path: path.into(), placeholder };
    assert!(exists(&root, &named("src/**/*.rs", false)));
    assert!(exists(&root, &named("config/samples/*.yaml", false)));
    assert!(exists(&root, &named("config/samples/x_", true)));
    assert!(!exists(&root, &named("config/nowhere/*.yaml", false)));
    assert!(!exists(&root, &named("config/nowhere/x_", true)));
    assert!(!exists(&root, &named("src/nowhere.rs", false)));
    assert!(exists(&root, &named("src/lib.rs", false)));
    assert!(exists(&root, &named("helm-charts/tinycode", false)));
}

#[test]
fn only_comments_of_code_are_scanned() {
    let rust = "let s = \"src/in/string.rs\"; // src/in/comment.rs\n\
                let c = '\"'; let r = r#\"tools/raw\"#; /* hack/block.sh */\n\
                fn f<'a>(x: &'a str) {} /// docs/doc.md";
    let comments = rust_comments(rust);
    assert_eq!(comments.lines().count(), 3);
    let named: Vec<String> = comments.lines().flat_map(named_paths).map(|n| n.path).collect();
    assert_eq!(named, ["src/in/comment.rs", "hack/block.sh", "docs/doc.md"]);

    let shell = "echo \"# src/quoted\" $# # hack/comment.sh\n# docs/line.md\nx=${#y} src/code";
    let named: Vec<String> = hash_comments(shell).lines().flat_map(named_paths).map(|n| n.path).collect();
    assert_eq!(named, ["hack/comment.sh", "docs/line.md"]);
}

/// Comments that point at a section of docs/benchmarks.md (`measured:`, the
/// file, a comma and the section's heading in double quotes) name a heading
/// that is there.
#[test]
fn benchmark_pointers_name_sections() {
    let root = repo_root();
    let doc = fs::read_to_string(root.join("docs/benchmarks.md")).expect("docs/benchmarks.md");
    let headings: BTreeSet<&str> =
        doc.lines().filter_map(|l| l.strip_prefix("### ").or_else(|| l.strip_prefix("## "))).collect();
    let marker = "docs/benchmarks.md, \"";
    let mut pointers = 0;
    let mut dead = Vec::new();
    for (file, kind) in files_to_scan(&root) {
        if !matches!(kind, Kind::Rust) {
            continue;
        }
        let comments = rust_comments(&fs::read_to_string(root.join(&file)).expect("readable"));
        // One line of words: comment markers and line breaks go.
        let words: Vec<&str> =
            comments.lines().map(|l| l.trim_start().trim_start_matches('/').trim_start_matches('!').trim()).collect();
        let text = words.join(" ");
        let mut rest = text.as_str();
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let end = rest.find('"').unwrap_or(rest.len());
            pointers += 1;
            if !headings.contains(&rest[..end]) {
                dead.push(format!("{}: \"{}\"", file.display(), &rest[..end]));
            }
        }
    }
    assert!(pointers > 0, "no comment points at docs/benchmarks.md: the scan is broken");
    assert!(dead.is_empty(), "sections of docs/benchmarks.md that do not exist:\n  {}", dead.join("\n  "));
}
