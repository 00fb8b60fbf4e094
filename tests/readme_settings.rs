//! README's "## Operator settings" table against the command line: every flag
//! of `run` (the global settings and the run flags) has a row, every row names
//! a flag that exists, and each row's environment variable and default are
//! those the flag is defined with (src/cli/mod.rs).
//!
//! A row reads `` | `--flag` / `ENV` | default | meaning | ``. The default cell
//! starts with the default in backticks (`` `""` `` for the empty string) when
//! the flag has one; a flag without one (computed, or unset) has prose there
//! that does not start with a backticked value.

use std::collections::BTreeMap;

use clap::CommandFactory;
use tinycode_operator::cli::Cli;

/// What the command line defines for one flag.
#[derive(Debug, PartialEq)]
struct Defined {
    env: Option<String>,
    default: Option<String>,
}

/// What README's table says for one flag.
#[derive(Debug)]
struct Row {
    env: Option<String>,
    /// The backticked value the default cell starts with, if any.
    default: Option<String>,
    line: usize,
}

/// Every long flag `tinycode-operator run` accepts, with its env and default.
fn run_flags() -> BTreeMap<String, Defined> {
    let mut root = Cli::command();
    root.build();
    let run = root.find_subcommand("run").expect("a run subcommand").clone();
    let mut flags = BTreeMap::new();
    // The root's own arguments are the settings (global or not); `run`'s are
    // the globals propagated to it plus any of its own.
    for arg in root.get_arguments().chain(run.get_arguments()) {
        if matches!(arg.get_id().as_str(), "help" | "version") {
            continue;
        }
        let Some(long) = arg.get_long() else { continue };
        let defaults: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
        let defined = Defined {
            env: arg.get_env().map(|e| e.to_string_lossy().into_owned()),
            default: (!defaults.is_empty()).then(|| defaults.join(",")),
        };
        flags.insert(format!("--{long}"), defined);
    }
    flags
}

/// The cells of a Markdown table row; a `|` inside a code span is no separator.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let (mut out, mut cell, mut in_code) = (Vec::new(), String::new(), false);
    for c in inner.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                cell.push(c);
            }
            '|' if !in_code => out.push(std::mem::take(&mut cell).trim().to_string()),
            _ => cell.push(c),
        }
    }
    out.push(cell.trim().to_string());
    out
}

/// The code spans of a cell, in order.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The rows of the settings table, by flag.
fn readme_rows(readme: &str) -> Result<BTreeMap<String, Row>, String> {
    let start = readme.find("\n## Operator settings\n").ok_or("README has no '## Operator settings' section")?;
    let section = &readme[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |i| i + 1)];
    let first_line = readme[..start + 1].lines().count();
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for (i, line) in section.lines().enumerate() {
        let line_no = first_line + i + 1;
        if line.starts_with("| flag / env | default | meaning |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            if rows.is_empty() {
                continue;
            }
            break;
        }
        let cells = cells(line);
        let [name, default, meaning] = &cells[..] else {
            return Err(format!("README line {line_no}: not three cells: {line}"));
        };
        if meaning.is_empty() {
            return Err(format!("README line {line_no}: no meaning given: {line}"));
        }
        let names = code_spans(name);
        let (flag, env) = match &names[..] {
            [flag] => (flag.clone(), None),
            [flag, env] => (flag.clone(), Some(env.clone())),
            _ => return Err(format!("README line {line_no}: the first cell is not `--flag` / `ENV`: {name}")),
        };
        let between: String = name.split('`').step_by(2).collect();
        if !flag.starts_with("--") || between.trim() != env.as_ref().map_or("", |_| "/") {
            return Err(format!("README line {line_no}: the first cell is not `--flag` / `ENV`: {name}"));
        }
        let default = default.starts_with('`').then(|| code_spans(default)[0].clone());
        let row = Row { env, default: default.map(|d| if d == "\"\"" { String::new() } else { d }), line: line_no };
        if let Some(earlier) = rows.insert(flag.clone(), row) {
            return Err(format!("README lines {} and {line_no} both describe {flag}", earlier.line));
        }
    }
    Ok(rows)
}

/// Every disagreement between the table and the command line.
fn disagreements(readme: &str) -> Vec<String> {
    let rows = match readme_rows(readme) {
        Ok(rows) => rows,
        Err(e) => return vec![e],
    };
    let flags = run_flags();
    let mut out = Vec::new();
    for (flag, defined) in &flags {
        let Some(row) = rows.get(flag) else {
            out.push(format!(
                "{flag} (env {:?}, default {:?}) has no row in README's settings table",
                defined.env, defined.default
            ));
            continue;
        };
        if row.env != defined.env {
            out.push(format!("README line {}: {flag}'s env is {:?}, the CLI's {:?}", row.line, row.env, defined.env));
        }
        match (&row.default, &defined.default) {
            (Some(said), Some(real)) if said != real => {
                out.push(format!("README line {}: {flag}'s default is `{said}`, the CLI's `{real}`", row.line))
            }
            (None, Some(real)) => out.push(format!(
                "README line {}: {flag}'s default cell does not start with the CLI's default `{real}`",
                row.line
            )),
            (Some(said), None) => out.push(format!(
                "README line {}: {flag} has no default in the CLI, but the table gives `{said}`",
                row.line
            )),
            _ => {}
        }
    }
    for (flag, row) in &rows {
        if !flags.contains_key(flag) {
            out.push(format!("README line {}: {flag} is no flag of `tinycode-operator run`", row.line));
        }
    }
    out
}

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md")
}

#[test]
fn the_settings_table_matches_the_command_line() {
    let problems = disagreements(&readme());
    assert!(problems.is_empty(), "README's settings table and src/cli/mod.rs disagree:\n{}", problems.join("\n"));
}

#[test]
fn the_table_and_the_flags_were_both_read() {
    let rows = readme_rows(&readme()).expect("the table");
    let flags = run_flags();
    assert!(
        flags.len() >= 25 && flags.contains_key("--max-retries") && flags.contains_key("--metrics-addr"),
        "{flags:?}"
    );
    assert_eq!(rows.len(), flags.len(), "{:?}", rows.keys().collect::<Vec<_>>());
    let concurrency = &rows["--concurrency"];
    assert_eq!((concurrency.env.as_deref(), concurrency.default.as_deref()), (Some("TINYCODE_CONCURRENCY"), None));
}

/// The check itself, on edited copies of README: each kind of mistake is found.
#[test]
fn each_kind_of_mistake_is_reported() {
    let readme = readme();
    let row = |flag: &str| {
        readme.lines().find(|l| l.starts_with(&format!("| `{flag}` "))).unwrap_or_else(|| panic!("no row for {flag}"))
    };
    let cases = [
        (readme.replace(&format!("{}\n", row("--ollama-image")), ""), "--ollama-image (env"),
        (
            readme.replace(row("--max-retries"), &row("--max-retries").replace("| `5` |", "| `3` |")),
            "--max-retries's default is `3`, the CLI's `5`",
        ),
        (
            readme.replace(row("--helm-bin"), &row("--helm-bin").replace("`HELM_BIN`", "`TINYCODE_HELM_BIN`")),
            "--helm-bin's env is Some(\"TINYCODE_HELM_BIN\")",
        ),
        (
            readme.replace(
                row("--max-retries"),
                &format!("{}\n| `--no-such-flag` / `X` | none | nothing |", row("--max-retries")),
            ),
            "--no-such-flag is no flag",
        ),
        (
            readme.replace(row("--concurrency"), &row("--concurrency").replace("| 4 per", "| `4` per")),
            "--concurrency has no default in the CLI",
        ),
        (
            readme.replace(row("--watch-namespaces"), &row("--watch-namespaces").replace("| `\"\"` ", "| all ")),
            "--watch-namespaces's default cell does not start with the CLI's default ``",
        ),
    ];
    for (edited, expected) in cases {
        let problems = disagreements(&edited);
        assert!(problems.iter().any(|p| p.contains(expected)), "expected {expected:?} among {problems:?}");
    }
}
